// The encoder against every golden vector of producers/golden/envelopes.json, new event ids
// against its prefixes, and the traceparent check against its traceparent_checks.

import assert from 'node:assert/strict';
import { test } from 'node:test';

import { encodeEnvelope, EventIdGenerator, newEventId, OutboxError, toRow, TRACEPARENT_MAX } from '@outboxd/producer';

import { golden } from './helpers.js';

const vectors = golden();

test('the golden file has cases and prefixes', () => {
  assert.ok(vectors.cases.length >= 9, `${vectors.cases.length} cases`);
  assert.ok(vectors.event_id_prefixes.length >= 5);
  assert.ok(vectors.traceparent_checks.length >= 10);
  const longestValid = Math.max(...vectors.traceparent_checks.filter((c) => c.valid).map((c) => [...c.traceparent].length));
  assert.equal(longestValid, TRACEPARENT_MAX, "the cap's edge is a golden check");
  assert.ok(vectors.cases.some((c) => c.event.traceparent !== '' && c.event.tracestate !== ''), 'a case with a trace context');
});

for (const { name, event, envelope_hex } of vectors.cases) {
  test(`golden envelope: ${name}`, () => {
    const bytes = encodeEnvelope({
      appCode: event.app_code,
      eventId: event.event_id,
      roomId: event.room_id,
      eventType: event.event_type,
      roomVersion: BigInt(event.room_version),
      occurredAtMs: BigInt(event.occurred_at_ms),
      body: Buffer.from(event.body_hex, 'hex'),
      traceparent: event.traceparent,
      tracestate: event.tracestate,
    });
    assert.equal(bytes.toString('hex'), envelope_hex);
  });

  // Where the case is a valid event (non-empty type, room and id), the row the library writes
  // carries the same envelope.
  if (event.event_type !== '' && event.room_id !== '' && event.event_id !== '' && event.app_code !== '') {
    test(`golden row: ${name}`, () => {
      const row = toRow({
        appCode: event.app_code,
        eventId: event.event_id,
        eventType: event.event_type,
        roomId: event.room_id,
        roomVersion: BigInt(event.room_version),
        occurredAt: BigInt(event.occurred_at_ms),
        body: Buffer.from(event.body_hex, 'hex'),
        traceparent: event.traceparent,
        tracestate: event.tracestate,
      });
      assert.equal(row.envelope.toString('hex'), envelope_hex);
      assert.equal(row.occurredAtMs, BigInt(event.occurred_at_ms));
      assert.equal(row.traceparent, event.traceparent);
      assert.equal(row.tracestate, event.tracestate);
    });
  }
}

test('number int64 fields encode like bigint ones', () => {
  const gift = vectors.cases.find((c) => c.name === 'gift')!;
  const bytes = encodeEnvelope({
    appCode: gift.event.app_code,
    eventId: gift.event.event_id,
    roomId: gift.event.room_id,
    eventType: gift.event.event_type,
    roomVersion: Number(gift.event.room_version),
    occurredAtMs: Number(gift.event.occurred_at_ms),
    body: new Uint8Array(Buffer.from(gift.event.body_hex, 'hex')), // a plain Uint8Array body
  });
  assert.equal(bytes.toString('hex'), gift.envelope_hex);
});

test('an event without a trace context encodes as before: fields 8 and 9 left out', () => {
  const traced = vectors.cases.find((c) => c.name === 'traced')!;
  const fields = {
    appCode: traced.event.app_code,
    eventId: traced.event.event_id,
    roomId: traced.event.room_id,
    eventType: traced.event.event_type,
    roomVersion: BigInt(traced.event.room_version),
    occurredAtMs: BigInt(traced.event.occurred_at_ms),
    body: Buffer.from(traced.event.body_hex, 'hex'),
  };
  const bare = encodeEnvelope(fields).toString('hex');
  assert.equal(encodeEnvelope({ ...fields, traceparent: '', tracestate: '' }).toString('hex'), bare);
  assert.ok(traced.envelope_hex.startsWith(bare), 'fields 8 and 9 come after the body');
  assert.ok(traced.envelope_hex.length > bare.length);
});

for (const { traceparent, valid } of vectors.traceparent_checks) {
  test(`golden traceparent ${valid ? 'accepted' : 'refused'}: ${JSON.stringify(traceparent)}`, () => {
    const event = { eventId: 'e-1', eventType: 'RoomGiftSent', roomId: 'room-42', roomVersion: 1, occurredAt: 0, traceparent };
    if (valid) {
      const row = toRow(event);
      assert.equal(row.traceparent, traceparent);
      assert.ok(row.envelope.includes(Buffer.from(traceparent)));
    } else {
      assert.throws(
        () => toRow(event),
        (error: unknown) => {
          assert.ok(error instanceof OutboxError, `${error}`);
          assert.equal(error.field, 'traceparent');
          assert.match(error.message, /^event \(eventId "e-1"\): traceparent ".*" is not a W3C traceparent: /);
          return true;
        },
      );
    }
  });
}

for (const { ms, prefix } of vectors.event_id_prefixes) {
  test(`golden event id prefix for ${ms} ms`, () => {
    const fromBigint = newEventId(BigInt(ms));
    assert.ok(fromBigint.startsWith(prefix), `${fromBigint} does not start with ${prefix}`);
    assert.equal(fromBigint.length, 4 + 13 + 16);
    if (Number.isSafeInteger(Number(ms))) {
      const fromNumber = new EventIdGenerator().next(Number(ms));
      assert.ok(fromNumber.startsWith(prefix), `${fromNumber} does not start with ${prefix}`);
    }
  });
}
