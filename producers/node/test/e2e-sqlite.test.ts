// End to end on SQLite: a temp file the host migrates; the library writes through better-sqlite3
// (the async API for single events, the sync one for batches, both inside BEGIN … COMMIT).

import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';

import Database from 'better-sqlite3';

import { enqueue, enqueueBatchSync } from '@outboxd/producer';

import { hostMissing, need, scenario, type StoredRow } from './e2e.js';

test('e2e sqlite: written in a transaction, delivered by the host through the webhook', async (t) => {
  if (!need(t, hostMissing())) return;
  const dir = mkdtempSync(join(tmpdir(), 'outboxd-node-sqlite-'));
  const path = join(dir, 'outbox.db');
  let db: Database.Database | undefined;
  const open = () => (db = new Database(path));
  const conn = () => db ?? open();
  try {
    await scenario(t, {
      url: `sqlite://${path}?mode=rwc`,
      async createBusinessTable() {
        conn().exec('CREATE TABLE gifts (id VARCHAR(64) PRIMARY KEY, note TEXT)');
      },
      async transaction(commit, fn) {
        const d = conn();
        d.exec('BEGIN IMMEDIATE');
        try {
          const result = await fn({
            business: async (id) => void d.prepare('INSERT INTO gifts (id, note) VALUES (?, ?)').run(id, 'gift'),
            enqueue: (event) => enqueue(d, event),
            enqueueBatch: async (events) => enqueueBatchSync(d, events),
          });
          d.exec(commit ? 'COMMIT' : 'ROLLBACK');
          return result;
        } catch (error) {
          if (d.inTransaction) d.exec('ROLLBACK');
          throw error;
        }
      },
      async outboxRows() {
        const rows = conn().prepare('SELECT * FROM room_outbox').safeIntegers(true).all() as Record<string, unknown>[];
        return rows.map(textInts);
      },
      async businessIds() {
        return conn().prepare('SELECT id FROM gifts').pluck().all() as string[];
      },
      async release() {
        db?.close();
        db = undefined;
      },
      async reacquire() {
        open();
      },
    });
  } finally {
    db?.close();
    rmSync(dir, { recursive: true, force: true });
  }
});

/** A row with its integer columns as decimal text. */
function textInts(row: Record<string, unknown>): StoredRow {
  const out: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(row)) out[k] = typeof v === 'bigint' ? String(v) : v;
  return out as unknown as StoredRow;
}
