// Which database a real driver object is (no connection is made).

import assert from 'node:assert/strict';
import { test } from 'node:test';

import Database from 'better-sqlite3';
import mysqlCallback from 'mysql2';
import mysql from 'mysql2/promise';
import pg from 'pg';

import { detectDialect, enqueue, enqueueSync, OutboxError } from '@outboxd/producer';

const event = { eventType: 'T', roomId: 'r', roomVersion: 1 };

test('better-sqlite3 Database is sqlite', () => {
  const db = new Database(':memory:');
  assert.equal(detectDialect(db), 'sqlite');
  db.close();
});

test('pg Client is postgres; pg Pool is refused', async () => {
  assert.equal(detectDialect(new pg.Client({ host: '127.0.0.1', port: 1 })), 'postgres');
  const pool = new pg.Pool({ host: '127.0.0.1', port: 1 });
  assert.throws(() => detectDialect(pool), /connection pool: pass the connection that holds your transaction/);
  await pool.end();
});

test('mysql2 pools and callback connections are refused', async () => {
  const pool = mysql.createPool({ host: '127.0.0.1', port: 1 });
  assert.throws(() => detectDialect(pool), /connection pool/);
  await pool.end();
  const callbackPool = mysqlCallback.createPool({ host: '127.0.0.1', port: 1 });
  assert.throws(() => detectDialect(callbackPool), /connection pool/);
  await new Promise((resolve) => callbackPool.end(resolve));
});

test('unknown objects are refused unless a dialect is given', async () => {
  assert.throws(() => detectDialect({}), /cannot tell the database .* options.dialect/);
  assert.throws(() => detectDialect(undefined), /expected a database client, got undefined/);
  await assert.rejects(enqueue({} as never, event, { dialect: 'postgres' }), /a postgres client needs a query\(\) method/);
  await assert.rejects(enqueue({ query: () => undefined } as never, event, { dialect: 'oracle' as never }), /unknown dialect "oracle"/);
  // A wrapper with pg's calling convention works once the dialect is named.
  const seen: string[] = [];
  const wrapper = { query: async (sql: string) => (seen.push(sql), { rowCount: 1 }) };
  assert.equal(await enqueue(wrapper, event, { dialect: 'postgres' }), true);
  assert.match(seen[0]!, /\$1/);
});

test('the sync API takes better-sqlite3 only', () => {
  assert.throws(() => enqueueSync(new pg.Client() as never, event), (e: unknown) => e instanceof OutboxError && /sync API is for better-sqlite3 only/.test(e.message));
});
