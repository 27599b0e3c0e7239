import { checkClientFor, type Client, detectDialect, mysqlCountsDuplicates, runCount, runWrite, runWriteSync, type SqliteDatabase } from './client.js';
import { OutboxError } from './errors.js';
import { type Event, type OutboxRow, toTracedRow } from './event.js';
import {
  checkTableName,
  chunks,
  COUNT_EXISTING_MAX_IDS,
  countExistingStatement,
  DEFAULT_TABLE,
  type Dialect,
  distinctRows,
  insertStatement,
  MAX_ROWS_PER_STATEMENT,
} from './sql.js';
import { currentTraceContext, type TraceContext } from './traceContext.js';

/** Options of {@link enqueue} and friends. */
export interface EnqueueOptions {
  /** The outbox table: a plain SQL identifier; default `room_outbox`. */
  table?: string;
  /**
   * The database, when it cannot be told from the client (a wrapper with the driver's
   * methods): `postgres` calls `query(text, values)`, `mysql` calls mysql2's `query({sql, values})`,
   * `sqlite` calls better-sqlite3's `prepare(sql).run(...)`.
   */
  dialect?: Dialect;
}

/**
 * Writes one event into the outbox on `client`, inside the transaction the caller has open on it
 * (commit or roll back the business change and the event together). An event without a
 * `traceparent` gets the active OpenTelemetry span's trace context, when `@opentelemetry/api` is
 * installed ({@link currentTraceContext}); `event` itself is not changed.
 *
 * @param client a node-postgres `Client`/`PoolClient`, a mysql2/promise connection, or a
 * better-sqlite3 `Database` (see {@link enqueueSync} inside `db.transaction(…)`).
 * @returns true if the row was inserted, false if `(appCode, eventId)` was already there.
 * @throws {@link OutboxError} naming the field for an invalid event (nothing is written);
 * database errors as the driver throws them.
 */
export async function enqueue(client: Client, event: Event, options: EnqueueOptions = {}): Promise<boolean> {
  const { dialect, table } = target(client, options);
  return (await save(dialect, client, table, [toTracedRow(event, undefined, currentTrace())])) === 1;
}

/**
 * Writes events into the outbox on `client`, inside the caller's transaction, as multi-row
 * INSERTs of at most 500 rows. Every event is checked before anything is written. Repeats of an id
 * in the batch: the first wins. Events without a `traceparent` get the active span's, as in
 * {@link enqueue}.
 *
 * @returns how many rows were inserted (ids already present, or repeated, are not counted).
 * @throws {@link OutboxError} naming the field and the event's position for an invalid event.
 */
export async function enqueueBatch(client: Client, events: readonly Event[], options: EnqueueOptions = {}): Promise<number> {
  const { dialect, table } = target(client, options);
  return save(dialect, client, table, toRows(events));
}

/**
 * {@link enqueue} for better-sqlite3, synchronous, for use inside `db.transaction(() => …)`
 * (whose function cannot await).
 *
 * @returns true if the row was inserted, false if the id was already there.
 */
export function enqueueSync(db: SqliteDatabase, event: Event, options: EnqueueOptions = {}): boolean {
  const table = syncTarget(db, options);
  return saveSync(db, table, [toTracedRow(event, undefined, currentTrace())]) === 1;
}

/**
 * {@link enqueueBatch} for better-sqlite3, synchronous.
 *
 * @returns how many rows were inserted.
 */
export function enqueueBatchSync(db: SqliteDatabase, events: readonly Event[], options: EnqueueOptions = {}): number {
  const table = syncTarget(db, options);
  return saveSync(db, table, toRows(events));
}

function toRows(events: readonly Event[]): OutboxRow[] {
  if (!Array.isArray(events)) throw new OutboxError('enqueueBatch: events must be an array');
  const current = currentTrace();
  return events.map((event, i) => toTracedRow(event, i, current));
}

/** The active span's trace context, asked for the first time it is needed, once. */
function currentTrace(): () => TraceContext | undefined {
  let asked = false;
  let context: TraceContext | undefined;
  return () => {
    if (!asked) {
      context = currentTraceContext();
      asked = true;
    }
    return context;
  };
}

function target(client: Client, options: EnqueueOptions): { dialect: Dialect; table: string } {
  const table = checkTableName(options.table ?? DEFAULT_TABLE);
  let dialect: Dialect;
  if (options.dialect === undefined) {
    dialect = detectDialect(client);
  } else {
    if (!['postgres', 'mysql', 'sqlite'].includes(options.dialect)) {
      throw new OutboxError(`unknown dialect ${JSON.stringify(options.dialect)}: postgres, mysql or sqlite`, { field: 'dialect' });
    }
    dialect = options.dialect;
    checkClientFor(dialect, client);
  }
  return { dialect, table };
}

function syncTarget(db: SqliteDatabase, options: EnqueueOptions): string {
  const { dialect, table } = target(db, options);
  if (dialect !== 'sqlite') {
    throw new OutboxError(`the sync API is for better-sqlite3 only; this is a ${dialect} client: use enqueue / enqueueBatch`, {
      field: 'client',
    });
  }
  return table;
}

async function save(dialect: Dialect, client: Client, table: string, rows: OutboxRow[]): Promise<number> {
  let inserted = 0;
  // Only MySQL with CLIENT_FOUND_ROWS counts a duplicate as an affected row: count the ids
  // already there first and take them off (as the host does).
  const countFirst = dialect === 'mysql' && mysqlCountsDuplicates(client);
  for (const chunk of chunks(distinctRows(rows), MAX_ROWS_PER_STATEMENT)) {
    const existing = countFirst ? await countExisting(dialect, client, table, chunk) : 0;
    const affected = await runWrite(dialect, client, insertStatement(dialect, table, chunk));
    inserted += Math.max(0, affected - existing);
  }
  return inserted;
}

function saveSync(db: SqliteDatabase, table: string, rows: OutboxRow[]): number {
  let inserted = 0;
  for (const chunk of chunks(distinctRows(rows), MAX_ROWS_PER_STATEMENT)) {
    inserted += runWriteSync(db, insertStatement('sqlite', table, chunk));
  }
  return inserted;
}

async function countExisting(dialect: Dialect, client: Client, table: string, rows: OutboxRow[]): Promise<number> {
  const byApp = new Map<string, string[]>();
  for (const row of rows) {
    const ids = byApp.get(row.appCode) ?? [];
    ids.push(row.eventId);
    byApp.set(row.appCode, ids);
  }
  let existing = 0;
  for (const [appCode, ids] of byApp) {
    for (const part of chunks(ids, COUNT_EXISTING_MAX_IDS)) {
      existing += await runCount(dialect, client, countExistingStatement(dialect, table, appCode, part));
    }
  }
  return existing;
}
