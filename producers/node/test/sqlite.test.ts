// The library on a real SQLite database (better-sqlite3, in memory) whose table is made from the
// host's own migration file: sync and async APIs, transactions, duplicates, a custom table name.

import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';

import Database from 'better-sqlite3';

import { build, encodeEnvelope, enqueue, enqueueBatch, enqueueBatchSync, enqueueSync, type Event } from '@outboxd/producer';

import { REPO_ROOT } from './helpers.js';

function open(table = 'room_outbox') {
  const db = new Database(':memory:');
  const migration = readFileSync(join(REPO_ROOT, 'migrations', 'sqlite', '0001_room_outbox.sql'), 'utf8');
  db.exec(migration.replaceAll('{{table}}', table));
  db.exec('CREATE TABLE gifts (id TEXT PRIMARY KEY)');
  return db;
}

const gift = (i: number, extra: Partial<Event> = {}): Event => ({
  eventId: `id-${i}`,
  eventType: 'RoomGiftSent',
  roomId: `room-${i % 2}`,
  roomVersion: BigInt(i),
  occurredAt: 1_700_000_000_000 + i,
  body: Buffer.from(`gift ${i}`),
  ...extra,
});

test('enqueueSync inside db.transaction: committed with the business row, rolled back with it', () => {
  const db = open();
  const write = db.transaction((giftId: string, event: Event, fail: boolean) => {
    db.prepare('INSERT INTO gifts (id) VALUES (?)').run(giftId);
    const inserted = enqueueSync(db, event);
    if (fail) throw new Error('business rule failed');
    return inserted;
  });
  assert.equal(write('g1', gift(1), false), true);
  assert.throws(() => write('g2', gift(2), true), /business rule failed/);
  assert.deepEqual(db.prepare('SELECT id FROM gifts').pluck().all(), ['g1']);
  assert.deepEqual(db.prepare('SELECT event_id FROM room_outbox').pluck().all(), ['id-1']);

  const row = db.prepare('SELECT * FROM room_outbox').safeIntegers(true).get() as Record<string, unknown>;
  assert.deepEqual(row, {
    app_code: 'default',
    event_id: 'id-1',
    event_type: 'RoomGiftSent',
    room_id: 'room-1',
    status: 'pending',
    envelope: encodeEnvelope({
      appCode: 'default',
      eventId: 'id-1',
      roomId: 'room-1',
      eventType: 'RoomGiftSent',
      roomVersion: 1n,
      occurredAtMs: 1_700_000_000_001n,
      body: Buffer.from('gift 1'),
    }),
    created_at_ms: 1_700_000_000_001n,
    retry_count: 0n,
    last_error: null,
    worker_id: '',
    lock_until_ms: null,
    next_retry_at_ms: 0n,
    updated_at_ms: 1_700_000_000_001n,
  });
  db.close();
});

test('duplicates count 0; a batch counts only new, distinct ids; tenants are separate', async () => {
  const db = open('custom_outbox');
  const options = { table: 'custom_outbox' };
  assert.equal(enqueueBatchSync(db, [gift(1), gift(2), gift(1, { roomId: 'later' })], options), 2);
  assert.equal(enqueueSync(db, gift(1), options), false);
  assert.equal(await enqueue(db, gift(2), options), false);
  assert.equal(await enqueueBatch(db, [gift(1), gift(3), gift(1, { appCode: 'live' })], options), 2);
  assert.deepEqual(
    db.prepare('SELECT app_code || \'/\' || event_id || \'/\' || room_id FROM custom_outbox ORDER BY 1').pluck().all(),
    ['default/id-1/room-1', 'default/id-2/room-0', 'default/id-3/room-1', 'live/id-1/room-1'],
  );
  // The default table is not there in this database.
  assert.throws(() => enqueueSync(db, gift(9)), /no such table: room_outbox/);
  db.close();
});

test('a batch larger than one statement, with int64 extremes and generated ids', () => {
  const db = open();
  const events: Event[] = Array.from({ length: 1234 }, (_, i) => ({
    eventType: 'RoomHeatChanged',
    roomId: `room-${i % 7}`,
    roomVersion: i === 0 ? 2n ** 63n - 1n : i === 1 ? -(2n ** 63n) : i,
    occurredAt: 1_700_000_000_000, // one millisecond: generated ids still sort in batch order
  }));
  assert.equal(enqueueBatchSync(db, events), 1234);
  const ids = db.prepare('SELECT event_id FROM room_outbox ORDER BY rowid').pluck().all() as string[];
  assert.equal(ids.length, 1234);
  assert.deepEqual([...ids].sort(), ids);
  assert.ok(ids.every((id) => id.startsWith('evt_0018bcfe56800')));
  const built = build('room-1', 'RoomGiftSent', 2n ** 62n, 0, Buffer.alloc(0));
  assert.equal(enqueueSync(db, built), true);
  assert.equal(enqueueSync(db, built), false);
  db.close();
});
