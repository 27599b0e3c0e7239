// build(), toRow() defaults, and the checks every event goes through before anything is written.

import assert from 'node:assert/strict';
import { test } from 'node:test';

import { build, type Event, OutboxError, toRow } from '@outboxd/producer';

const valid: Event = { eventType: 'RoomGiftSent', roomId: 'room-42', roomVersion: 7, occurredAt: 1_700_000_000_000 };

function refused(event: unknown, field: string, pattern: RegExp, index?: number): void {
  assert.throws(
    () => toRow(event as Event, index),
    (error: unknown) => {
      assert.ok(error instanceof OutboxError, `${error}`);
      assert.equal(error.field, field);
      assert.equal(error.eventIndex, index);
      assert.match(error.message, pattern);
      return true;
    },
  );
}

test('build: default tenant, a fresh id of the time, every field kept', () => {
  const body = Buffer.from('{"gift":"rose"}');
  const event = build('room-42', 'RoomGiftSent', 7n, new Date(1_700_000_000_000), body);
  assert.equal(event.appCode, 'default');
  assert.match(event.eventId, /^evt_0018bcfe56800[0-9a-f]{16}$/);
  assert.equal(event.roomId, 'room-42');
  assert.equal(event.eventType, 'RoomGiftSent');
  assert.equal(event.roomVersion, 7n);
  assert.equal(event.occurredAt, 1_700_000_000_000);
  assert.equal(event.body, body);
  const later = build('room-42', 'RoomGiftSent', 8n, undefined, body);
  assert.ok(Math.abs(Number(later.occurredAt) - Date.now()) < 5_000);
  assert.equal(build('r', 't', 1, 5n, body).occurredAt, 5n);
});

test('build refuses bad arguments at once', () => {
  assert.throws(() => build('', 'RoomGiftSent', 1, undefined, Buffer.alloc(0)), /roomId is empty/);
  assert.throws(() => build('r', 'RoomGiftSent', 1, new Date(Number.NaN), Buffer.alloc(0)), /occurredAt is an invalid Date/);
});

test('toRow: defaults and the row columns', () => {
  const row = toRow(valid);
  assert.equal(row.appCode, 'default');
  assert.match(row.eventId, /^evt_0018bcfe56800[0-9a-f]{16}$/);
  assert.equal(row.occurredAtMs, 1_700_000_000_000n);
  assert.equal(row.roomVersion, 7n);
  assert.equal(row.body.length, 0);
  assert.ok(Buffer.isBuffer(row.envelope));
  assert.equal(toRow({ ...valid, appCode: '' }).appCode, 'default');
  assert.equal(toRow({ ...valid, appCode: 'live' }).appCode, 'live');
  const now = toRow({ ...valid, occurredAt: undefined });
  assert.ok(Math.abs(Number(now.occurredAtMs) - Date.now()) < 5_000);
});

test('room_version beyond 2^53 as a bigint is exact', () => {
  const big = 2n ** 62n + 3n;
  const row = toRow({ ...valid, roomVersion: big, eventId: 'e' });
  assert.equal(row.roomVersion, big);
  // field 5 varint of 2^62+3: decode it back out of the envelope
  const bytes = row.envelope;
  const at = bytes.indexOf(0x28);
  let value = 0n;
  for (let i = at + 1, shift = 0n; ; i++, shift += 7n) {
    value |= BigInt(bytes[i]! & 0x7f) << shift;
    if ((bytes[i]! & 0x80) === 0) break;
  }
  assert.equal(value, big);
});

test('limits: characters are Unicode scalar values', () => {
  toRow({ ...valid, roomId: '🎁'.repeat(128), eventId: 'é'.repeat(128), eventType: 't'.repeat(128), appCode: '直'.repeat(64) });
  refused({ ...valid, roomId: '🎁'.repeat(129) }, 'roomId', /roomId is 129 characters, at most 128 fit/);
  refused({ ...valid, eventId: 'x'.repeat(129) }, 'eventId', /eventId is 129 characters, at most 128 fit/);
  refused({ ...valid, eventType: 't'.repeat(129) }, 'eventType', /eventType is 129 characters/);
  refused({ ...valid, appCode: 'a'.repeat(65) }, 'appCode', /appCode is 65 characters, at most 64 fit/);
});

test('required fields', () => {
  refused({ ...valid, eventType: '' }, 'eventType', /eventType is empty/);
  refused({ ...valid, roomId: '' }, 'roomId', /roomId is empty/);
  refused({ ...valid, eventId: '' }, 'eventId', /eventId is empty \(leave it out/);
  refused({ ...valid, roomId: undefined }, 'roomId', /roomId must be a string, got undefined/);
  refused({ ...valid, eventType: 42 }, 'eventType', /must be a string, got number/);
  refused({ ...valid, roomVersion: undefined }, 'roomVersion', /roomVersion expected a bigint or an integer number/);
  refused(null, undefined as unknown as string, /expected an Event object, got null/);
});

test('int64 fields', () => {
  toRow({ ...valid, roomVersion: -(2n ** 63n), occurredAt: 2n ** 63n - 1n });
  refused({ ...valid, roomVersion: 2n ** 63n }, 'roomVersion', /outside the int64 range/);
  refused({ ...valid, roomVersion: 2 ** 53 }, 'roomVersion', /beyond Number.MAX_SAFE_INTEGER.*pass a bigint/);
  refused({ ...valid, roomVersion: 1.5 }, 'roomVersion', /1.5 is not an integer/);
  refused({ ...valid, occurredAt: -(2n ** 63n) - 1n }, 'occurredAt', /outside the int64 range/);
  refused({ ...valid, occurredAt: '2024-01-01' }, 'occurredAt', /expected a bigint or an integer number, got string/);
});

test('strings must be well-formed Unicode; body must be bytes', () => {
  refused({ ...valid, roomId: 'room-\ud800' }, 'roomId', /not well-formed Unicode/);
  refused({ ...valid, body: 'text' }, 'body', /body must be a Uint8Array .* got string/);
  refused({ ...valid, body: [1, 2] }, 'body', /got an array/);
});

test('errors name the event: its id and its position in a batch', () => {
  refused({ ...valid, eventId: 'cmd-17', roomId: '' }, 'roomId', /^event #3 \(eventId "cmd-17"\): roomId is empty$/, 3);
  refused({ ...valid, eventId: 'y'.repeat(200) }, 'eventId', new RegExp(`^event \\(eventId "${'y'.repeat(40)}…"\\): eventId is 200`));
  refused({ ...valid, eventType: '' }, 'eventType', /^event #0: eventType is empty$/, 0);
});

test('trace context: kept as given, empty strings are none, fields 8 and 9 of the envelope', () => {
  const traceparent = '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01';
  const row = toRow({ ...valid, eventId: 'e', traceparent, tracestate: 'rojo=00f067aa0ba902b7' });
  assert.equal(row.traceparent, traceparent);
  assert.equal(row.tracestate, 'rojo=00f067aa0ba902b7');
  const bare = toRow({ ...valid, eventId: 'e' });
  assert.equal(bare.traceparent, '');
  assert.equal(bare.tracestate, '');
  assert.ok(row.envelope.subarray(0, bare.envelope.length).equals(bare.envelope));
  assert.equal(row.envelope[bare.envelope.length], (8 << 3) | 2);
  assert.deepEqual(toRow({ ...valid, eventId: 'e', traceparent: '', tracestate: '' }).envelope, bare.envelope);
  assert.deepEqual(toRow({ ...valid, eventId: 'e', traceparent: undefined, tracestate: undefined }).envelope, bare.envelope);
  const later = '01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-what-comes-later';
  assert.equal(toRow({ ...valid, traceparent: later }).traceparent, later);
});

test('trace context checks name the field and the event', () => {
  const traceparent = '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01';
  refused({ ...valid, eventId: 'cmd-1', tracestate: 'rojo=1' }, 'tracestate', /^event #2 \(eventId "cmd-1"\): tracestate is given without a traceparent$/, 2);
  refused({ ...valid, traceparent: '', tracestate: 'rojo=1' }, 'tracestate', /tracestate is given without a traceparent/);
  toRow({ ...valid, traceparent, tracestate: `k=${'v'.repeat(510)}` });
  refused({ ...valid, traceparent, tracestate: `k=${'v'.repeat(511)}` }, 'tracestate', /tracestate is 513 characters, at most 512 fit/);
  refused({ ...valid, traceparent, tracestate: 'k=v\n' }, 'tracestate', /tracestate has "\\n" at 3, only printable ASCII/);
  refused({ ...valid, traceparent, tracestate: 'k=é' }, 'tracestate', /tracestate has "é" at 2/);
  refused({ ...valid, traceparent: 42 }, 'traceparent', /traceparent must be a string, got number/);
  refused({ ...valid, traceparent, tracestate: null }, 'tracestate', /tracestate must be a string, got null/);
  refused({ ...valid, traceparent: `01${traceparent.slice(2)}-\ud800` }, 'traceparent', /traceparent is not well-formed Unicode/);
  refused(
    { ...valid, eventId: 'cmd-2', traceparent: 'ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01' },
    'traceparent',
    /^event #0 \(eventId "cmd-2"\): traceparent "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01" is not a W3C traceparent: version ff is invalid$/,
    0,
  );
  refused({ ...valid, traceparent: `${traceparent}-x` }, 'traceparent', /version 00 is exactly 55 characters, this is 57/);
  refused({ ...valid, traceparent: traceparent.replace('4bf92f3577b34da6a3ce929d0e0e4736', '0'.repeat(32)) }, 'traceparent', /the trace id is all zeros/);
  refused({ ...valid, traceparent: traceparent.replace('00f067aa0ba902b7', '0'.repeat(16)) }, 'traceparent', /the parent id is all zeros/);
  refused({ ...valid, traceparent: `01${traceparent.slice(2)}x` }, 'traceparent', /goes on after the flags only behind a '-'/);
  // A later version: at most 256 characters (Unicode scalar values, not UTF-16 code units or bytes).
  const later = `01${traceparent.slice(2)}-`;
  toRow({ ...valid, traceparent: later + 'x'.repeat(200) });
  toRow({ ...valid, traceparent: later + '🎁'.repeat(200) });
  refused({ ...valid, traceparent: later + 'x'.repeat(201) }, 'traceparent', /a later version is at most 256 characters, this is 257$/);
  refused({ ...valid, traceparent: later + '🎁'.repeat(201) }, 'traceparent', /a later version is at most 256 characters, this is 257$/);
  refused({ ...valid, traceparent: 'x'.repeat(200) }, 'traceparent', new RegExp(`"${'x'.repeat(80)}…" is not a W3C traceparent: is not version-traceid-parentid-flags`));
});

test('build: the trace context is set on the result', () => {
  const traceparent = '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00';
  const event = { ...build('room-42', 'RoomGiftSent', 7n, 0, Buffer.alloc(0)), traceparent };
  assert.equal(toRow(event).traceparent, traceparent);
});
