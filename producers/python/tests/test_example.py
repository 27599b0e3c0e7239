"""example.py writes one RoomGiftSent row and prints its id."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from support.databases import TestDatabase, create_outbox_table
from support.paths import PRODUCER

from outboxd_producer import EventEnvelope

EXAMPLE = PRODUCER / "example.py"


def run_example(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(EXAMPLE), *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_example_writes_one_gift_event(sqlite_db: TestDatabase) -> None:
    create_outbox_table(sqlite_db)
    path = sqlite_db.url.removeprefix("sqlite://").removesuffix("?mode=rwc")
    done = run_example(path)
    assert done.returncode == 0, done.stderr
    event_id = done.stdout.strip()
    assert re.fullmatch(r"evt_[0-9a-f]{29}", event_id), done.stdout
    conn = sqlite_db.connect()
    rows = conn.execute(
        "SELECT app_code, event_id, event_type, room_id, status, envelope FROM room_outbox"
    ).fetchall()
    conn.close()
    assert [row[:5] for row in rows] == [
        ("default", event_id, "RoomGiftSent", "room-42", "pending")
    ]
    envelope = EventEnvelope.FromString(rows[0][5])
    assert envelope.body == b'{"gift":"rose","from":"u1","to":"u2"}'
    assert envelope.room_version == 7


def test_example_explains_a_missing_database_or_table(tmp_path: Path) -> None:
    missing = run_example(str(tmp_path / "nope.db"))
    assert missing.returncode == 1
    assert "outboxd migrate" in missing.stderr
    empty = tmp_path / "empty.db"
    empty.touch()
    no_table = run_example(str(empty))
    assert no_table.returncode == 1
    assert "no such table: room_outbox" in no_table.stderr
    assert run_example().returncode == 2
