// End to end on PostgreSQL: a fresh database per test (dropped afterwards), node-postgres.

import { test } from 'node:test';

import pg from 'pg';

import { enqueue, enqueueBatch } from '@outboxd/producer';

import { hostMissing, need, scenario, type StoredRow, uniqueName } from './e2e.js';

const SERVER = { host: '127.0.0.1', port: 5432, user: 'postgres' };

async function reachable(): Promise<string | undefined> {
  const admin = new pg.Client({ ...SERVER, database: 'postgres', connectionTimeoutMillis: 5_000 });
  try {
    await admin.connect();
    return undefined;
  } catch (error) {
    return `PostgreSQL at ${SERVER.host}:${SERVER.port} does not answer (${(error as Error).message})`;
  } finally {
    await admin.end().catch(() => undefined);
  }
}

test('e2e postgres: written in a transaction, delivered by the host through the webhook', async (t) => {
  if (!need(t, hostMissing() ?? (await reachable()))) return;
  const name = uniqueName('outboxd_node');
  const admin = new pg.Client({ ...SERVER, database: 'postgres' });
  await admin.connect();
  await admin.query(`CREATE DATABASE ${name}`);
  const client = new pg.Client({ ...SERVER, database: name });
  try {
    await client.connect();
    await scenario(t, {
      url: `postgres://postgres@127.0.0.1:5432/${name}`,
      async createBusinessTable() {
        await client.query('CREATE TABLE gifts (id VARCHAR(64) PRIMARY KEY, note TEXT)');
      },
      async transaction(commit, fn) {
        await client.query('BEGIN');
        try {
          const result = await fn({
            business: async (id) => void (await client.query('INSERT INTO gifts (id, note) VALUES ($1, $2)', [id, 'gift'])),
            enqueue: (event) => enqueue(client, event),
            enqueueBatch: (events) => enqueueBatch(client, events),
          });
          await client.query(commit ? 'COMMIT' : 'ROLLBACK');
          return result;
        } catch (error) {
          await client.query('ROLLBACK');
          throw error;
        }
      },
      async outboxRows() {
        // int8 columns come back as text from node-postgres already.
        const { rows } = await client.query('SELECT * FROM room_outbox');
        return rows.map((r) => ({ ...r, retry_count: String(r.retry_count) }) as StoredRow);
      },
      async businessIds() {
        return (await client.query('SELECT id FROM gifts')).rows.map((r) => r.id as string);
      },
    });
  } finally {
    await client.end().catch(() => undefined);
    await admin.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
    await admin.end();
  }
});
