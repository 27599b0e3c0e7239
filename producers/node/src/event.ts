import { encodeEnvelope } from './envelope.js';
import { OutboxError } from './errors.js';
import { newEventId } from './eventId.js';
import { describe, toInt64 } from './int64.js';
import { type TraceContext, traceparentProblem, tracestateProblem } from './traceContext.js';

/** The tenant used when an event names none. */
export const DEFAULT_APP_CODE = 'default';

/** The column sizes of migration 0001, in characters (Unicode scalar values). */
export const LIMITS = { appCode: 64, eventId: 128, eventType: 128, roomId: 128 } as const;

/** One domain event of a room, as a producer hands it to {@link enqueue}. */
export interface Event {
  /** Tenant (`app_code`); `"default"` when absent or empty. At most 64 characters. */
  appCode?: string;
  /**
   * Idempotency key, unique per tenant: enqueueing the same id twice keeps the first row. Absent
   * (`undefined`): a new {@link newEventId} of `occurredAt`. When given it must be non-empty; at
   * most 128 characters. Derive it from the command to make retries safe.
   */
  eventId?: string;
  /** Event type (routing key), e.g. `RoomGiftSent`. Non-empty, at most 128 characters. */
  eventType: string;
  /** The room; per-room ordering is keyed on (appCode, roomId). Non-empty, at most 128 characters. */
  roomId: string;
  /** Version of the room after this event (int64; use a bigint beyond 2^53). */
  roomVersion: bigint | number;
  /** When it happened: a Date or UTC milliseconds (int64); default now. */
  occurredAt?: Date | number | bigint;
  /** The event message itself (usually a serialized protobuf message); default empty. */
  body?: Uint8Array;
  /**
   * The W3C Trace Context `traceparent` of the producer's span, e.g.
   * `00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01`. Absent or empty: {@link enqueue}
   * takes the active OpenTelemetry span's when `@opentelemetry/api` is installed (see
   * {@link currentTraceContext}), else the event has none.
   */
  traceparent?: string;
  /**
   * The W3C `tracestate` that goes with `traceparent` (only with one); at most 512 characters of
   * printable ASCII. Absent or empty: none.
   */
  tracestate?: string;
}

/** An event with every field set, as {@link build} returns it. */
export interface BuiltEvent extends Event {
  /** `"default"`; replace it for another tenant. */
  appCode: string;
  /** A fresh {@link newEventId} of `occurredAt`; replace it with one derived from the command for safe retries. */
  eventId: string;
  /** UTC milliseconds (a bigint when given as one). */
  occurredAt: number | bigint;
  /** The event message bytes. */
  body: Uint8Array;
}

/** One `room_outbox` row as it is written: the key columns and the encoded envelope. */
export interface OutboxRow {
  /** `app_code` column and envelope field (the default applied). */
  appCode: string;
  /** `event_id` column and envelope field (generated if the event had none). */
  eventId: string;
  /** `event_type` column and envelope field. */
  eventType: string;
  /** `room_id` column and envelope field. */
  roomId: string;
  /** Envelope `room_version`. */
  roomVersion: bigint;
  /** `occurred_at_ms` of the envelope; also the row's `created_at_ms` and `updated_at_ms`. */
  occurredAtMs: bigint;
  /** Envelope `body`. */
  body: Uint8Array;
  /** Envelope `traceparent` (the event's, or the active span's when {@link enqueue} took it); empty when none. */
  traceparent: string;
  /** Envelope `tracestate`; empty when none. */
  tracestate: string;
  /** The `outbox.v1.EventEnvelope` bytes (the `envelope` column). */
  envelope: Buffer;
}

/**
 * A new event of the default tenant with a fresh time-ordered event id (like the host's
 * `Record::build`). Set `appCode` or `eventId` on the result to change them.
 *
 * @param occurredAt a Date or UTC milliseconds; `undefined` means now.
 * @throws {@link OutboxError} naming the field when an argument is invalid.
 * @example
 * ```ts
 * const event = { ...build('room-42', 'RoomGiftSent', 7n, new Date(), body), appCode: 'live' };
 * ```
 */
export function build(
  roomId: string,
  eventType: string,
  roomVersion: bigint | number,
  occurredAt: Date | number | bigint | undefined,
  body: Uint8Array,
): BuiltEvent {
  const ms = occurredAtMs(occurredAt, undefined);
  const event: BuiltEvent = {
    appCode: DEFAULT_APP_CODE,
    eventId: newEventId(ms),
    eventType,
    roomId,
    roomVersion,
    occurredAt: typeof occurredAt === 'bigint' ? ms : Number(ms),
    body,
  };
  toRow(event); // validates every field now rather than at enqueue time
  return event;
}

/**
 * Checks an event and turns it into the row that is written: defaults applied (tenant, id,
 * time), limits checked, envelope encoded. The trace context is the event's own only: where
 * {@link enqueue} would take the active span's, set it from {@link currentTraceContext}.
 *
 * @param index the event's position in a batch, for error messages.
 * @throws {@link OutboxError} naming the field and the event.
 */
export function toRow(event: Event, index?: number): OutboxRow {
  return toTracedRow(event, index, undefined);
}

/**
 * {@link toRow}, the trace context of an event without a `traceparent` taken from `current` (the
 * enqueue functions pass the active span's). The event's own values are checked first, whatever
 * `current` gives.
 */
export function toTracedRow(event: Event, index: number | undefined, current: (() => TraceContext | undefined) | undefined): OutboxRow {
  const where = (extra?: string) =>
    `event${index === undefined ? '' : ` #${index}`}${extra === undefined ? '' : ` (eventId ${JSON.stringify(shorten(extra))})`}`;
  if (event === null || typeof event !== 'object') {
    throw new OutboxError(`${where()}: expected an Event object, got ${describe(event)}`, { eventIndex: index });
  }
  const fail = (field: string, problem: string): never => {
    const id: unknown = event.eventId;
    throw new OutboxError(`${where(typeof id === 'string' && id !== '' ? id : undefined)}: ${field} ${problem}`, {
      field,
      eventIndex: index,
    });
  };

  const appCode = event.appCode === undefined || event.appCode === '' ? DEFAULT_APP_CODE : event.appCode;
  checkText(appCode, 'appCode', LIMITS.appCode, false, fail);
  if (event.eventId !== undefined) {
    checkText(event.eventId, 'eventId', LIMITS.eventId, true, fail);
  }
  checkText(event.eventType, 'eventType', LIMITS.eventType, true, fail);
  checkText(event.roomId, 'roomId', LIMITS.roomId, true, fail);
  const roomVersion = toInt64(event.roomVersion);
  if (typeof roomVersion === 'string') fail('roomVersion', roomVersion);
  const ms = occurredAtMs(event.occurredAt, (problem) => fail('occurredAt', problem));
  const body = event.body ?? new Uint8Array(0);
  if (!(body instanceof Uint8Array)) {
    fail('body', `must be a Uint8Array (a Buffer is one), got ${describe(body)}`);
  }
  // An empty traceparent / tracestate is one not given (proto3 writes neither).
  const traceparent = traceText(event.traceparent, 'traceparent', fail);
  const tracestate = traceText(event.tracestate, 'tracestate', fail);
  if (traceparent !== '') {
    const problem = traceparentProblem(traceparent);
    if (problem !== undefined) fail('traceparent', `${JSON.stringify(shorten(traceparent, 80))} is not a W3C traceparent: ${problem}`);
  }
  if (tracestate !== '') {
    if (traceparent === '') fail('tracestate', 'is given without a traceparent');
    const problem = tracestateProblem(tracestate);
    if (problem !== undefined) fail('tracestate', problem);
  }
  const trace = (traceparent === '' ? current?.() : undefined) ?? { traceparent, tracestate };
  const eventId = event.eventId ?? newEventId(ms);

  const fields = {
    appCode,
    eventId,
    eventType: event.eventType,
    roomId: event.roomId,
    roomVersion: roomVersion as bigint,
    occurredAtMs: ms,
    body,
    traceparent: trace.traceparent,
    tracestate: trace.tracestate,
  };
  return { ...fields, envelope: encodeEnvelope(fields) };
}

/** UTC milliseconds of an `occurredAt` value (now when undefined). */
function occurredAtMs(value: Date | number | bigint | undefined, fail: ((problem: string) => never) | undefined): bigint {
  const bad = (problem: string): never => {
    if (fail) fail(problem);
    throw new OutboxError(`occurredAt ${problem}`, { field: 'occurredAt' });
  };
  if (value === undefined) return BigInt(Date.now());
  if (value instanceof Date) {
    const t = value.getTime();
    return Number.isNaN(t) ? bad('is an invalid Date') : BigInt(t);
  }
  const ms = toInt64(value);
  return typeof ms === 'string' ? bad(ms) : ms;
}

function checkText(
  value: unknown,
  field: string,
  max: number,
  nonEmpty: boolean,
  fail: (field: string, problem: string) => never,
): void {
  if (typeof value !== 'string') fail(field, `must be a string, got ${describe(value)}`);
  const text = value as string;
  if (nonEmpty && text === '') {
    fail(field, field === 'eventId' ? 'is empty (leave it out to have one generated)' : 'is empty');
  }
  if (!text.isWellFormed()) fail(field, 'is not well-formed Unicode (it has a lone surrogate)');
  // Unicode scalar values, as the host (Rust `chars()`) and the databases count them.
  let chars = 0;
  for (const _ of text) chars++;
  if (chars > max) fail(field, `is ${chars} characters, at most ${max} fit`);
}

/** An optional trace context field: `''` when absent; a string with no lone surrogate. */
function traceText(value: unknown, field: string, fail: (field: string, problem: string) => never): string {
  if (value === undefined) return '';
  if (typeof value !== 'string') fail(field, `must be a string, got ${describe(value)}`);
  const text = value as string;
  if (!text.isWellFormed()) fail(field, 'is not well-formed Unicode (it has a lone surrogate)');
  return text;
}

function shorten(id: string, max = 40): string {
  const chars = [...id];
  return chars.length > max ? `${chars.slice(0, max).join('')}…` : id;
}
