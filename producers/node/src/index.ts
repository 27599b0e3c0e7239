/**
 * @outboxd/producer: write outboxd outbox rows inside your own database transaction.
 *
 * @example
 * ```ts
 * import { build, enqueue } from '@outboxd/producer';
 * await client.query('BEGIN');
 * await client.query('UPDATE rooms SET version = version + 1 WHERE id = $1', ['room-42']);
 * await enqueue(client, build('room-42', 'RoomGiftSent', 8n, new Date(), body));
 * await client.query('COMMIT');
 * ```
 * @packageDocumentation
 */

export { enqueue, enqueueBatch, enqueueBatchSync, enqueueSync, type EnqueueOptions } from './enqueue.js';
export { build, DEFAULT_APP_CODE, LIMITS, toRow, type BuiltEvent, type Event, type OutboxRow } from './event.js';
export { EventIdGenerator, newEventId } from './eventId.js';
export { encodeEnvelope, type EnvelopeFields } from './envelope.js';
export { OutboxError } from './errors.js';
export { currentTraceContext, TRACEPARENT_MAX, TRACESTATE_MAX, type TraceContext } from './traceContext.js';
export { detectDialect, type Client, type QueryableClient, type SqliteDatabase } from './client.js';
export {
  checkTableName,
  countExistingStatement,
  DEFAULT_TABLE,
  insertStatement,
  MAX_ROWS_PER_STATEMENT,
  type Dialect,
  type Statement,
} from './sql.js';
