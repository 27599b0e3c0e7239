// The statements per dialect, the table-name check, chunking, and the MySQL duplicate count
// (on recording clients; the real databases are in the e2e tests).

import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';

import {
  checkTableName,
  countExistingStatement,
  enqueue,
  enqueueBatch,
  type Event,
  insertStatement,
  OutboxError,
  toRow,
} from '@outboxd/producer';

import { REPO_ROOT } from './helpers.js';

const COLUMNS =
  'app_code, event_id, event_type, room_id, status, envelope, created_at_ms, retry_count, last_error, worker_id, lock_until_ms, next_retry_at_ms, updated_at_ms';

const rows = [
  toRow({ appCode: 'a', eventId: 'e1', eventType: 'T', roomId: 'r', roomVersion: 1, occurredAt: 10 }),
  toRow({ appCode: 'a', eventId: 'e2', eventType: 'T', roomId: 'r', roomVersion: 2, occurredAt: 11 }),
];

test('postgres INSERT: $n placeholders, created_at_ms reused for updated_at_ms, ON CONFLICT DO NOTHING', () => {
  const { sql, params } = insertStatement('postgres', 'room_outbox', rows);
  assert.equal(
    sql,
    `INSERT INTO room_outbox (${COLUMNS}) VALUES ` +
      `($1, $2, $3, $4, 'pending', $5, $6, 0, NULL, '', NULL, 0, $6), ` +
      `($7, $8, $9, $10, 'pending', $11, $12, 0, NULL, '', NULL, 0, $12) ` +
      'ON CONFLICT (app_code, event_id) DO NOTHING',
  );
  assert.deepEqual(params, ['a', 'e1', 'T', 'r', rows[0]!.envelope, 10n, 'a', 'e2', 'T', 'r', rows[1]!.envelope, 11n]);
});

test('sqlite INSERT: ? placeholders, ON CONFLICT DO NOTHING', () => {
  const { sql, params } = insertStatement('sqlite', 'outbox_2', rows.slice(0, 1));
  assert.equal(
    sql,
    `INSERT INTO outbox_2 (${COLUMNS}) VALUES (?, ?, ?, ?, 'pending', ?, ?, 0, NULL, '', NULL, 0, ?) ON CONFLICT (app_code, event_id) DO NOTHING`,
  );
  assert.deepEqual(params, ['a', 'e1', 'T', 'r', rows[0]!.envelope, 10n, 10n]);
});

test('mysql INSERT: ON DUPLICATE KEY UPDATE event_id = event_id, never INSERT IGNORE', () => {
  const { sql, params } = insertStatement('mysql', 'room_outbox', rows);
  assert.equal(
    sql,
    `INSERT INTO room_outbox (${COLUMNS}) VALUES ` +
      `(?, ?, ?, ?, 'pending', ?, ?, 0, NULL, '', NULL, 0, ?), (?, ?, ?, ?, 'pending', ?, ?, 0, NULL, '', NULL, 0, ?) ` +
      'ON DUPLICATE KEY UPDATE event_id = event_id',
  );
  assert.equal(params.length, 14);
  assert.doesNotMatch(sql, /IGNORE/);
});

test('count of existing ids: one primary-key read per tenant', () => {
  assert.deepEqual(countExistingStatement('mysql', 'room_outbox', 'live', ['x', 'y']), {
    sql: 'SELECT COUNT(*) AS n FROM room_outbox WHERE app_code = ? AND event_id IN (?, ?)',
    params: ['live', 'x', 'y'],
  });
  assert.equal(
    countExistingStatement('postgres', 't', 'live', ['x', 'y', 'z']).sql,
    'SELECT COUNT(*) AS n FROM t WHERE app_code = $1 AND event_id IN ($2, $3, $4)',
  );
});

test('table names: plain identifiers only', () => {
  for (const good of ['room_outbox', '_t', 'T9', 'a'.repeat(48), 'orders', 'user_events']) assert.equal(checkTableName(good), good);
  for (const bad of ['', '9t', 'room outbox', 'room_outbox; DROP TABLE x', 'a.b', '"t"', 'a'.repeat(49), 'té', 'order', 'USER', 'Select', 'conflict']) {
    assert.throws(() => checkTableName(bad), OutboxError, bad);
    assert.throws(() => insertStatement('sqlite', bad, rows), OutboxError, bad);
  }
});

test("table names: every word the host reserves is refused (host/src/store/table_name.rs)", () => {
  const source = readFileSync(join(REPO_ROOT, 'host', 'src', 'store', 'table_name.rs'), 'utf8');
  const words = /const RESERVED_WORDS: &str = "([^"]*)";/.exec(source)?.[1]?.split(/\s+/).filter(Boolean) ?? [];
  assert.ok(words.length > 300, `${words.length} words`);
  for (const word of words) assert.throws(() => checkTableName(word), /is a reserved SQL word/, word);
});

/** A client that looks like node-postgres and records what it is asked. */
function fakePg(rowCount: (sql: string) => number) {
  const calls: { sql: string; params: unknown[] }[] = [];
  return {
    calls,
    client: {
      escapeIdentifier: (s: string) => s,
      async query(sql: string | { text: string; values: unknown[] }, params?: unknown[]) {
        const text = typeof sql === 'string' ? sql : sql.text;
        calls.push({ sql: text, params: params ?? (sql as { values: unknown[] }).values });
        return { rowCount: rowCount(text), rows: [] };
      },
    },
  };
}

/** A client that looks like a mysql2/promise connection, with the given client flags. */
function fakeMysql(clientFlags: number | undefined, existing: number, affected: number) {
  const calls: string[] = [];
  return {
    calls,
    client: {
      connection: clientFlags === undefined ? {} : { config: { clientFlags } },
      async execute() {
        throw new Error('not used');
      },
      async query(options: { sql: string; values: unknown[] }) {
        calls.push(options.sql);
        if (options.sql.startsWith('SELECT')) return [[[existing]], []];
        return [{ affectedRows: affected }, undefined];
      },
    },
  };
}

const events = (n: number, appCode = 'default'): Event[] =>
  Array.from({ length: n }, (_, i) => ({ appCode, eventId: `id-${i}`, eventType: 'T', roomId: `r${i % 3}`, roomVersion: i, occurredAt: 1000 + i }));

test('a batch of 1201 events is three INSERTs of at most 500 rows; repeats are dropped, the first wins', async () => {
  const { client, calls } = fakePg((sql) => (sql.match(/'pending'/g) ?? []).length);
  const batch = [...events(1201), { ...events(1)[0]!, roomId: 'other' }];
  assert.equal(await enqueueBatch(client, batch, { table: 'my_outbox' }), 1201);
  assert.deepEqual(
    calls.map((c) => (c.sql.match(/'pending'/g) ?? []).length),
    [500, 500, 201],
  );
  assert.ok(calls.every((c) => c.sql.startsWith('INSERT INTO my_outbox ')));
  assert.equal(calls[0]!.params[3], 'r0'); // the first id-0 was kept, not the later 'other'
  assert.ok(calls.every((c) => !c.params.includes('other')));
});

test('an invalid event in a batch writes nothing', async () => {
  const { client, calls } = fakePg(() => 1);
  const batch = [...events(3), { ...events(1)[0]!, eventId: 'late', roomId: '' }];
  await assert.rejects(enqueueBatch(client, batch), /event #3 \(eventId "late"\): roomId is empty/);
  await assert.rejects(enqueue(client, events(1)[0]!, { table: 'x;y' }), /table name "x;y"/);
  assert.equal(calls.length, 0);
});

test('mysql with CLIENT_FOUND_ROWS (mysql2 default): existing ids are counted first and taken off', async () => {
  // 5 events, 2 already there: found rows reports 5 affected (3 inserted + 2 found).
  const { client, calls } = fakeMysql(2 | 1, 2, 5);
  assert.equal(await enqueueBatch(client, events(5)), 3);
  assert.equal(calls.length, 2);
  assert.match(calls[0]!, /^SELECT COUNT\(\*\) AS n FROM room_outbox WHERE app_code = \? AND event_id IN \(\?, \?, \?, \?, \?\)$/);
  assert.match(calls[1]!, /^INSERT INTO room_outbox/);
  // Unknown flags: assume the default.
  const unknown = fakeMysql(undefined, 1, 1);
  assert.equal(await enqueue(unknown.client, events(1)[0]!), false);
  assert.equal(unknown.calls.length, 2);
});

test('mysql without CLIENT_FOUND_ROWS: the affected count is the inserted count, no extra read', async () => {
  const { client, calls } = fakeMysql(1, 99, 3);
  assert.equal(await enqueueBatch(client, events(5)), 3);
  assert.equal(calls.length, 1);
});

test('one count per tenant', async () => {
  const { client, calls } = fakeMysql(2, 0, 4);
  assert.equal(await enqueueBatch(client, [...events(2, 'a'), ...events(2, 'b')]), 4);
  assert.deepEqual(calls.map((s) => s.slice(0, 6)), ['SELECT', 'SELECT', 'INSERT']);
});
