// Writes one RoomGiftSent event into an outboxd SQLite database, in the same transaction as the
// gift itself, and prints the event id.
//
//   node producers/node/build/example.js target/demo/outboxd.db
//
// The file must hold the outbox table already: `outboxd --config demo/outboxd.toml migrate`.

import Database from 'better-sqlite3';

import { build, enqueueSync } from '@outboxd/producer';

const path = process.argv[2];
if (!path) {
  console.error('usage: node build/example.js <sqlite file whose room_outbox table `outboxd migrate` made>');
  process.exit(2);
}

const db = new Database(path, { fileMustExist: true });
db.pragma('busy_timeout = 5000'); // the host may be running on the same file
db.exec('CREATE TABLE IF NOT EXISTS gifts (id INTEGER PRIMARY KEY, room_id TEXT NOT NULL, gift TEXT NOT NULL, sender TEXT NOT NULL, receiver TEXT NOT NULL)');

// better-sqlite3 transactions are synchronous: use the sync API inside them.
const sendGift = db.transaction((roomId: string, gift: string, from: string, to: string) => {
  db.prepare('INSERT INTO gifts (room_id, gift, sender, receiver) VALUES (?, ?, ?, ?)').run(roomId, gift, from, to);
  const version = db.prepare('SELECT COUNT(*) FROM gifts WHERE room_id = ?').pluck().get(roomId) as number;
  const body = Buffer.from(JSON.stringify({ gift, from, to }));
  const event = build(roomId, 'RoomGiftSent', version, new Date(), body);
  enqueueSync(db, event); // the row commits or rolls back with the gift
  return event.eventId;
});

const eventId = sendGift.immediate('room-42', 'rose', 'u1', 'u2');
db.close();
console.log(eventId);
