"""Writes one RoomGiftSent event into an outboxd SQLite database and prints its event id.

From the repository root (the virtualenv is the one producers/python/test.sh makes)::

    mkdir -p target/demo && target/debug/outboxd --config demo/outboxd.toml migrate
    .toolchains/producers-python/bin/python producers/python/example.py target/demo/outboxd.db
    target/debug/outboxd --config demo/outboxd.toml run --drain   # delivers it to the log plugin
"""

from __future__ import annotations

import sqlite3
import sys
from datetime import UTC, datetime
from pathlib import Path

from outboxd_producer import build, enqueue


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(f"usage: {argv[0]} PATH_TO_OUTBOXD_SQLITE_DB", file=sys.stderr)
        return 2
    path = Path(argv[1])
    if not path.is_file():
        print(f"{path} does not exist: run `outboxd migrate` for it first", file=sys.stderr)
        return 1
    event = build(
        room_id="room-42",
        event_type="RoomGiftSent",
        room_version=7,
        occurred_at=datetime.now(UTC),
        body=b'{"gift":"rose","from":"u1","to":"u2"}',  # usually a serialized protobuf message
    )
    db = sqlite3.connect(path, timeout=5)  # waits while a running host holds the write lock
    try:
        with db:  # one transaction: committed here, rolled back if anything raises
            # Your business change goes here, on the same connection, e.g.
            # db.execute("INSERT INTO gifts (room_id, gift) VALUES (?, ?)", ("room-42", "rose"))
            enqueue(db, event)
    except sqlite3.OperationalError as error:
        print(
            f"cannot write to {path}: {error} (did `outboxd migrate` make the table?)",
            file=sys.stderr,
        )
        return 1
    finally:
        db.close()
    print(event.event_id)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
