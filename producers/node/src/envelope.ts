/**
 * The `outbox.v1.EventEnvelope` protobuf message (proto/outbox/v1/envelope.proto), encoded by hand:
 * proto3 leaves out fields at their default value; strings and bytes are length-delimited; int64
 * is a varint of the two's-complement value (a negative number takes ten bytes).
 */

import { OutboxError } from './errors.js';
import { toInt64 } from './int64.js';

/** The fields of an `outbox.v1.EventEnvelope`. */
export interface EnvelopeFields {
  /** Field 1: tenant; equal to the row's `app_code`. */
  appCode: string;
  /** Field 2: idempotency key; equal to the row's `event_id`. */
  eventId: string;
  /** Field 3: the room. */
  roomId: string;
  /** Field 4: event type (routing key). */
  eventType: string;
  /** Field 5: version of the room after the event (int64). */
  roomVersion: bigint | number;
  /** Field 6: when the event happened, UTC milliseconds (int64). */
  occurredAtMs: bigint | number;
  /** Field 7: the event message itself, opaque bytes. */
  body: Uint8Array;
  /** Field 8: the W3C `traceparent` of the producer's span; absent or empty: none (not written). */
  traceparent?: string;
  /** Field 9: the W3C `tracestate` that goes with `traceparent`; absent or empty: none (not written). */
  tracestate?: string;
}

const WIRE_VARINT = 0;
const WIRE_LEN = 2;

/**
 * The protobuf encoding of an envelope, byte for byte what the host's prost encoder writes
 * (checked against `producers/golden/envelopes.json`).
 *
 * @throws {@link OutboxError} when an int64 field is out of range or a string is not well-formed
 * Unicode.
 */
export function encodeEnvelope(fields: EnvelopeFields): Buffer {
  const parts: Uint8Array[] = [];
  putBytes(parts, 1, utf8(fields.appCode, 'appCode'));
  putBytes(parts, 2, utf8(fields.eventId, 'eventId'));
  putBytes(parts, 3, utf8(fields.roomId, 'roomId'));
  putBytes(parts, 4, utf8(fields.eventType, 'eventType'));
  putInt64(parts, 5, int64(fields.roomVersion, 'roomVersion'));
  putInt64(parts, 6, int64(fields.occurredAtMs, 'occurredAtMs'));
  if (!(fields.body instanceof Uint8Array)) {
    throw new OutboxError('envelope: body must be a Uint8Array (a Buffer is one)', { field: 'body' });
  }
  putBytes(parts, 7, fields.body);
  putBytes(parts, 8, utf8(fields.traceparent ?? '', 'traceparent'));
  putBytes(parts, 9, utf8(fields.tracestate ?? '', 'tracestate'));
  return Buffer.concat(parts);
}

/** The varint encoding of an unsigned 64-bit value (a negative int64 as its two's complement). */
export function varint(value: bigint): Uint8Array {
  let v = BigInt.asUintN(64, value);
  const out: number[] = [];
  while (v >= 0x80n) {
    out.push(Number(v & 0x7fn) | 0x80);
    v >>= 7n;
  }
  out.push(Number(v));
  return Uint8Array.from(out);
}

function putBytes(parts: Uint8Array[], field: number, data: Uint8Array): void {
  if (data.length === 0) return;
  parts.push(varint(BigInt((field << 3) | WIRE_LEN)), varint(BigInt(data.length)), data);
}

function putInt64(parts: Uint8Array[], field: number, value: bigint): void {
  if (value === 0n) return;
  parts.push(varint(BigInt((field << 3) | WIRE_VARINT)), varint(value));
}

function utf8(value: string, field: string): Buffer {
  if (typeof value !== 'string') {
    throw new OutboxError(`envelope: ${field} must be a string`, { field });
  }
  if (!value.isWellFormed()) {
    throw new OutboxError(`envelope: ${field} is not well-formed Unicode (a lone surrogate)`, { field });
  }
  return Buffer.from(value, 'utf8');
}

function int64(value: bigint | number, field: string): bigint {
  const v = toInt64(value);
  if (typeof v === 'string') throw new OutboxError(`envelope: ${field}: ${v}`, { field });
  return v;
}
