"""enqueue / enqueue_batch on each real database (the table from the repository's migration 0001):
the row's columns, idempotency and counts, transactions, chunking, cursors, table names."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from support.databases import TestDatabase, create_outbox_table

from outboxd_producer import (
    Dialect,
    Event,
    EventEnvelope,
    InvalidEventError,
    InvalidTableNameError,
    build,
    enqueue,
    enqueue_batch,
)
from outboxd_producer.dialect import resolve_dialect


def rows(db: TestDatabase, table: str = "room_outbox") -> dict[tuple[str, str], dict[str, Any]]:
    """Every row of ``table``, by (app_code, event_id), read on a new connection."""
    conn = db.connect()
    try:
        cursor = conn.cursor()
        cursor.execute(
            "SELECT app_code, event_id, event_type, room_id, status, envelope, created_at_ms, "
            "retry_count, last_error, worker_id, lock_until_ms, next_retry_at_ms, updated_at_ms "
            f"FROM {table}"
        )
        names = [d[0] for d in cursor.description]
        found = [dict(zip(names, row)) for row in cursor.fetchall()]
    finally:
        conn.close()
    for row in found:
        row["envelope"] = bytes(row["envelope"])
    return {(row["app_code"], row["event_id"]): row for row in found}


def events(count: int, *, app_code: str = "default", prefix: str = "e") -> list[Event]:
    return [
        Event(f"room-{i % 3}", "RoomGiftSent", i, f"body-{i}".encode(), app_code=app_code,
              event_id=f"{prefix}-{i:05d}", occurred_at_ms=1_700_000_000_000 + i)
        for i in range(count)
    ]  # fmt: skip


def test_the_row_is_what_the_host_writes(outbox_db: TestDatabase) -> None:
    event = build("房间-1", "RoomGiftSent", 7, 1_700_000_000_000, b"\x00\xff rose", app_code="live")
    conn = outbox_db.connect()
    assert enqueue(conn, event) is True
    conn.commit()
    conn.close()
    row = rows(outbox_db)[("live", event.event_id)]
    assert row == {
        "app_code": "live",
        "event_id": event.event_id,
        "event_type": "RoomGiftSent",
        "room_id": "房间-1",
        "status": "pending",
        "envelope": event.encoded_envelope(),
        "created_at_ms": 1_700_000_000_000,
        "retry_count": 0,
        "last_error": None,
        "worker_id": "",
        "lock_until_ms": None,
        "next_retry_at_ms": 0,
        "updated_at_ms": 1_700_000_000_000,
    }
    envelope = EventEnvelope.FromString(row["envelope"])
    assert (envelope.app_code, envelope.event_id, envelope.body) == (
        "live",
        event.event_id,
        b"\x00\xff rose",
    )


def test_the_dialect_is_told_from_the_real_driver(db: TestDatabase) -> None:
    conn = db.connect()
    try:
        assert resolve_dialect(conn) is db.dialect
        assert resolve_dialect(conn.cursor()) is db.dialect
    finally:
        conn.close()


def test_a_duplicate_id_counts_zero_and_keeps_the_first_row(outbox_db: TestDatabase) -> None:
    first = Event("room-1", "RoomGiftSent", 1, b"first", event_id="gift-1", occurred_at_ms=10)
    again = dataclasses.replace(first, body=b"second", room_version=2)
    conn = outbox_db.connect()
    assert enqueue(conn, first) is True
    assert enqueue(conn, again) is False  # same transaction
    conn.commit()
    assert enqueue(conn, again) is False  # a later one
    # The same id under another tenant is another event.
    assert enqueue(conn, dataclasses.replace(first, app_code="live")) is True
    conn.commit()
    conn.close()
    found = rows(outbox_db)
    assert len(found) == 2
    assert found[("default", "gift-1")]["envelope"] == first.encoded_envelope()


def test_a_batch_counts_only_new_rows_and_the_first_repeat_wins(outbox_db: TestDatabase) -> None:
    old = events(3)
    conn = outbox_db.connect()
    assert enqueue_batch(conn, old) == 3
    conn.commit()
    new = events(5, prefix="n")
    repeat = dataclasses.replace(new[0], body=b"repeat")
    batch = [old[0], new[0], repeat, old[1], *new[1:], old[2], new[4]]
    assert enqueue_batch(conn, iter(batch)) == 5  # any iterable
    conn.commit()
    assert enqueue_batch(conn, batch) == 0
    assert enqueue_batch(conn, []) == 0
    conn.commit()
    conn.close()
    found = rows(outbox_db)
    assert len(found) == 8
    assert found[("default", "n-00000")]["envelope"] == new[0].encoded_envelope()


def test_a_rolled_back_transaction_writes_neither_row(outbox_db: TestDatabase) -> None:
    ph = outbox_db.ph
    conn = outbox_db.connect()
    cursor = conn.cursor()
    cursor.execute("CREATE TABLE gifts (id INTEGER PRIMARY KEY, room_id VARCHAR(128) NOT NULL)")
    conn.commit()
    cursor.execute(f"INSERT INTO gifts (id, room_id) VALUES ({ph}, {ph})", (1, "room-1"))
    assert enqueue(cursor, build("room-1", "RoomGiftSent", 1, None, b"kept", event_id="kept"))
    conn.commit()
    cursor.execute(f"INSERT INTO gifts (id, room_id) VALUES ({ph}, {ph})", (2, "room-1"))
    assert enqueue(cursor, build("room-1", "RoomGiftSent", 2, None, b"gone", event_id="gone"))
    conn.rollback()
    cursor.execute("SELECT id FROM gifts")
    assert [r[0] for r in cursor.fetchall()] == [1]
    conn.close()
    assert set(rows(outbox_db)) == {("default", "kept")}


def test_large_batches_are_split_and_counted(outbox_db: TestDatabase) -> None:
    """More rows than one statement takes, two tenants, some already present."""
    batch = events(700) + events(600, app_code="live")
    conn = outbox_db.connect()
    assert enqueue_batch(conn, batch[::13]) == len(batch[::13])
    conn.commit()
    assert enqueue_batch(conn, batch) == len(batch) - len(batch[::13])
    conn.commit()
    conn.close()
    assert len(rows(outbox_db)) == 1300


def test_a_cursor_works_and_stays_open(outbox_db: TestDatabase) -> None:
    conn = outbox_db.connect()
    cursor = conn.cursor()
    assert enqueue_batch(cursor, events(2)) == 2
    cursor.execute("SELECT COUNT(*) FROM room_outbox")  # still usable
    assert cursor.fetchone()[0] == 2
    conn.commit()
    conn.close()


def test_a_custom_table(db: TestDatabase) -> None:
    create_outbox_table(db, "gift_outbox")
    conn = db.connect()
    assert enqueue_batch(conn, events(3), table="gift_outbox", dialect=db.dialect.value) == 3
    conn.commit()
    with pytest.raises(InvalidTableNameError):
        enqueue(conn, events(1)[0], table="gift_outbox; DROP TABLE gift_outbox")
    conn.close()
    assert len(rows(db, "gift_outbox")) == 3


def test_nothing_is_written_when_one_event_is_invalid(outbox_db: TestDatabase) -> None:
    batch = events(600)
    broken = events(1, prefix="bad")[0]
    object.__setattr__(broken, "room_id", "")  # bypasses the constructor's check
    conn = outbox_db.connect()
    with pytest.raises(InvalidEventError, match="room_id must not be empty.*'bad-00000'"):
        enqueue_batch(conn, [*batch, broken])
    with pytest.raises(TypeError, match=r"events\[1\] is a dict"):
        enqueue_batch(conn, [batch[0], {"room_id": "r"}])  # type: ignore[list-item]
    conn.commit()
    conn.close()
    assert rows(outbox_db) == {}


def test_mysql_counts_right_with_client_found_rows(mariadb_db: TestDatabase) -> None:
    """With CLIENT_FOUND_ROWS a duplicate is an affected row: counting the existing ids first
    corrects it."""
    from pymysql.constants import CLIENT

    from outboxd_producer.mysql_rows import found_rows_flag

    create_outbox_table(mariadb_db)
    plain = mariadb_db.connect()
    found = mariadb_db.connect(client_flag=CLIENT.FOUND_ROWS)
    assert found_rows_flag(plain) is False
    assert found_rows_flag(found) is True
    batch = events(10) + events(5, app_code="live")
    assert enqueue_batch(found, batch[:4] + batch[10:12]) == 6
    found.commit()
    # Check the premise: with the flag, MySQL reports a duplicate as affected.
    cursor = found.cursor()
    cursor.execute(
        "INSERT INTO room_outbox (app_code, event_id, event_type, room_id, envelope, "
        "created_at_ms, updated_at_ms) VALUES ('default', 'e-00000', 't', 'r', '', 0, 0) "
        "ON DUPLICATE KEY UPDATE event_id = event_id"
    )
    assert cursor.rowcount == 1
    found.rollback()
    # (Each commits before the other writes: an upsert locks the duplicate rows it finds.)
    for conn in (found, plain):
        assert enqueue(conn, batch[0]) is False
        assert enqueue_batch(conn, batch[:4] + batch[10:12]) == 0
        conn.commit()
    assert enqueue_batch(found, batch) == 9
    found.commit()
    assert enqueue_batch(plain, batch) == 0
    plain.commit()
    assert enqueue(plain, events(1, prefix="p")[0]) is True
    plain.commit()
    found.close()
    plain.close()
    assert len(rows(mariadb_db)) == 16


def test_mysql_cursor_of_a_found_rows_connection(mariadb_db: TestDatabase) -> None:
    """The flag is read through a cursor's connection too (a dict cursor's row as well)."""
    from pymysql.constants import CLIENT
    from pymysql.cursors import DictCursor

    create_outbox_table(mariadb_db)
    conn = mariadb_db.connect(client_flag=CLIENT.FOUND_ROWS)
    cursor = conn.cursor(DictCursor)
    assert enqueue_batch(cursor, events(4)) == 4
    assert enqueue_batch(cursor, events(6)) == 2
    conn.commit()
    conn.close()


def test_explicit_dialect_overrides_detection(sqlite_db: TestDatabase) -> None:
    create_outbox_table(sqlite_db)
    conn = sqlite_db.connect()
    assert enqueue(conn, events(1)[0], dialect=Dialect.SQLITE) is True
    conn.commit()
    conn.close()
