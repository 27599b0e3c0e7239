// The example program on a table made from the host's SQLite migration: it prints the id of the
// one row it wrote, next to the gift.

import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';

import Database from 'better-sqlite3';

import { REPO_ROOT } from './helpers.js';

const EXAMPLE = join(dirname(fileURLToPath(import.meta.url)), '..', 'example.js');

test('example.js writes one RoomGiftSent event with the gift and prints its id', () => {
  const dir = mkdtempSync(join(tmpdir(), 'outboxd-node-example-'));
  try {
    const path = join(dir, 'outboxd.db');
    const db = new Database(path);
    db.exec(readFileSync(join(REPO_ROOT, 'migrations', 'sqlite', '0001_room_outbox.sql'), 'utf8').replaceAll('{{table}}', 'room_outbox'));
    db.close();
    const printed = execFileSync(process.execPath, [EXAMPLE, path], { encoding: 'utf8' }).trim();
    assert.match(printed, /^evt_[0-9a-f]{29}$/);
    const check = new Database(path, { readonly: true });
    const rows = check.prepare('SELECT event_id, event_type, room_id, status FROM room_outbox').all();
    assert.deepEqual(rows, [{ event_id: printed, event_type: 'RoomGiftSent', room_id: 'room-42', status: 'pending' }]);
    assert.equal(check.prepare('SELECT COUNT(*) FROM gifts').pluck().get(), 1);
    check.close();
    // No table: the example refuses a file that does not exist.
    assert.throws(() => execFileSync(process.execPath, [EXAMPLE, join(dir, 'missing.db')], { stdio: 'pipe' }));
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
