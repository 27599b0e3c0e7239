// End to end on MariaDB/MySQL: a fresh database per test (dropped afterwards), mysql2/promise with
// its default client flags (CLIENT_FOUND_ROWS: a duplicate is an affected row).

import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';

import mysql from 'mysql2/promise';

import { enqueue, enqueueBatch } from '@outboxd/producer';

import { hostMissing, need, scenario, type StoredRow, uniqueName } from './e2e.js';
import { REPO_ROOT } from './helpers.js';

const SERVER = { host: '127.0.0.1', port: 3306, user: 'root', password: '' };

async function reachable(): Promise<string | undefined> {
  try {
    const admin = await mysql.createConnection({ ...SERVER, connectTimeout: 5_000 });
    await admin.end();
    return undefined;
  } catch (error) {
    return `MariaDB/MySQL at ${SERVER.host}:${SERVER.port} does not answer (${(error as Error).message})`;
  }
}

test('e2e mariadb: written in a transaction, delivered by the host through the webhook', async (t) => {
  if (!need(t, hostMissing() ?? (await reachable()))) return;
  const name = uniqueName('outboxd_node');
  const admin = await mysql.createConnection(SERVER);
  await admin.query(`CREATE DATABASE ${name}`);
  let conn: mysql.Connection | undefined;
  try {
    // Read BIGINTs back exactly, as text.
    conn = await mysql.createConnection({ ...SERVER, database: name, supportBigNumbers: true, bigNumberStrings: true });
    const c = conn;
    await scenario(t, {
      url: `mysql://root@127.0.0.1:3306/${name}`,
      async createBusinessTable() {
        await c.query('CREATE TABLE gifts (id VARCHAR(64) PRIMARY KEY, note TEXT) ENGINE=InnoDB');
      },
      async transaction(commit, fn) {
        await c.beginTransaction();
        try {
          const result = await fn({
            business: async (id) => void (await c.query('INSERT INTO gifts (id, note) VALUES (?, ?)', [id, 'gift'])),
            enqueue: (event) => enqueue(c, event),
            enqueueBatch: (events) => enqueueBatch(c, events),
          });
          await (commit ? c.commit() : c.rollback());
          return result;
        } catch (error) {
          await c.rollback();
          throw error;
        }
      },
      async outboxRows() {
        const [rows] = await c.query('SELECT * FROM room_outbox');
        return (rows as Record<string, unknown>[]).map((r) => {
          const row: Record<string, unknown> = { ...r, retry_count: String(r.retry_count) };
          // The partition MariaDB derives from room_id and whether the row failed (virtual
          // columns, migrations 0004 and 0007).
          delete row.outbox_partition;
          delete row.outbox_failed;
          return row as unknown as StoredRow;
        });
      },
      async businessIds() {
        const [rows] = await c.query('SELECT id FROM gifts');
        return (rows as { id: string }[]).map((r) => r.id);
      },
    });
  } finally {
    await conn?.end().catch(() => undefined);
    await admin.query(`DROP DATABASE IF EXISTS ${name}`);
    await admin.end();
  }
});

test('mariadb: the inserted count is right with and without CLIENT_FOUND_ROWS, on connections and pool connections', async (t) => {
  if (!need(t, await reachable())) return;
  const name = uniqueName('outboxd_node_flags');
  const admin = await mysql.createConnection(SERVER);
  await admin.query(`CREATE DATABASE ${name}`);
  try {
    const migration = readFileSync(join(REPO_ROOT, 'migrations', 'mysql', '0001_room_outbox.sql'), 'utf8');
    const setup = await mysql.createConnection({ ...SERVER, database: name });
    await setup.query(migration.replaceAll('{{table}}', 'flags_outbox'));
    await setup.end();

    const event = (id: string) => ({ eventId: id, eventType: 'RoomGiftSent', roomId: 'room-1', roomVersion: 1 });
    let n = 0;
    for (const flags of [undefined, ['-FOUND_ROWS']]) {
      const pool = mysql.createPool({ ...SERVER, database: name, connectionLimit: 1, ...(flags ? { flags } : {}) });
      const single = await mysql.createConnection({ ...SERVER, database: name, ...(flags ? { flags } : {}) });
      try {
        const pooled = await pool.getConnection();
        for (const conn of [pooled, single]) {
          const options = { table: 'flags_outbox' };
          const [a, b, c] = [`id-${n++}`, `id-${n++}`, `id-${n++}`];
          await conn.beginTransaction();
          assert.equal(await enqueueBatch(conn, [event(a), event(b)], options), 2);
          assert.equal(await enqueue(conn, event(a), options), false, `duplicate, flags ${flags}`);
          assert.equal(await enqueueBatch(conn, [event(a), event(b), event(c)], options), 1, `batch, flags ${flags}`);
          await conn.commit();
        }
        pooled.release();
      } finally {
        await single.end();
        await pool.end();
      }
    }
    const [rows] = await admin.query(`SELECT COUNT(*) AS n FROM ${name}.flags_outbox`);
    assert.equal(Number((rows as { n: number }[])[0]!.n), n);
  } finally {
    await admin.query(`DROP DATABASE IF EXISTS ${name}`);
    await admin.end();
  }
});
