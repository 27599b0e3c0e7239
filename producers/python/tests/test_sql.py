"""The statements of each dialect, their bound values, and the table name check."""

from __future__ import annotations

import pytest

from outboxd_producer import Dialect, DialectError, Event, InvalidTableNameError
from outboxd_producer.sql import (
    COLUMNS,
    PARAMS_PER_ROW,
    ROWS_PER_STATEMENT,
    Binder,
    check_table_name,
    count_existing,
    insert_rows,
)

A = Event("room-1", "RoomGiftSent", 7, b"a", app_code="default", event_id="e-1", occurred_at_ms=100)
B = Event("房间", "RoomMicChanged", 8, b"", app_code="live", event_id="e-2", occurred_at_ms=200)

COLUMN_LIST = (
    "app_code, event_id, event_type, room_id, status, envelope, created_at_ms, retry_count, "
    "last_error, worker_id, lock_until_ms, next_retry_at_ms, updated_at_ms"
)


def row(ph: str) -> str:
    return f"({ph}, {ph}, {ph}, {ph}, 'pending', {ph}, {ph}, 0, NULL, '', NULL, 0, {ph})"


def test_columns_are_migration_0001s() -> None:
    assert ", ".join(COLUMNS) == COLUMN_LIST


@pytest.mark.parametrize(
    ("dialect", "paramstyle", "ph", "tail"),
    [
        (Dialect.POSTGRES, "pyformat", "%s", " ON CONFLICT (app_code, event_id) DO NOTHING"),
        (Dialect.SQLITE, "qmark", "?", " ON CONFLICT (app_code, event_id) DO NOTHING"),
        (Dialect.MYSQL, "pyformat", "%s", " ON DUPLICATE KEY UPDATE event_id = event_id"),
    ],
)
def test_insert_per_dialect(dialect: Dialect, paramstyle: str, ph: str, tail: str) -> None:
    statement = insert_rows(dialect, paramstyle, "room_outbox", [A, B])
    assert statement.sql == (
        f"INSERT INTO room_outbox ({COLUMN_LIST}) VALUES {row(ph)}, {row(ph)}{tail}"
    )
    assert statement.params == (
        "default", "e-1", "RoomGiftSent", "room-1", A.encoded_envelope(), 100, 100,
        "live", "e-2", "RoomMicChanged", "房间", B.encoded_envelope(), 200, 200,
    )  # fmt: skip


def test_insert_in_numbered_and_named_styles() -> None:
    numeric = insert_rows(Dialect.POSTGRES, "numeric", "t", [A])
    assert "VALUES (:1, :2, :3, :4, 'pending', :5, :6, 0, NULL, '', NULL, 0, :7)" in numeric.sql
    named = insert_rows(Dialect.SQLITE, "named", "t", [A])
    assert (
        "VALUES (:p1, :p2, :p3, :p4, 'pending', :p5, :p6, 0, NULL, '', NULL, 0, :p7)" in named.sql
    )
    assert named.params == {
        "p1": "default", "p2": "e-1", "p3": "RoomGiftSent", "p4": "room-1",
        "p5": A.encoded_envelope(), "p6": 100, "p7": 100,
    }  # fmt: skip


def test_count_existing_is_a_primary_key_read() -> None:
    statement = count_existing("format", "room_outbox", "live", ["a", "b", "c"])
    assert statement.sql == (
        "SELECT COUNT(*) FROM room_outbox WHERE app_code = %s AND event_id IN (%s, %s, %s)"
    )
    assert statement.params == ("live", "a", "b", "c")


def test_a_custom_table_name_is_used() -> None:
    assert insert_rows(Dialect.SQLITE, "qmark", "gift_outbox", [A]).sql.startswith(
        "INSERT INTO gift_outbox ("
    )


@pytest.mark.parametrize("name", ["room_outbox", "_t", "T1", "a" * 48])
def test_plain_identifiers_are_table_names(name: str) -> None:
    assert check_table_name(name) == name


@pytest.mark.parametrize(
    "name",
    ["", "1room", "room-outbox", "room outbox", "room_outbox; DROP TABLE x", "a" * 49, "ümlaut",
     "room_outbox\n", '"quoted"', "s.t"],
)  # fmt: skip
def test_anything_else_is_refused(name: str) -> None:
    with pytest.raises(InvalidTableNameError, match="not a plain SQL identifier"):
        check_table_name(name)
    with pytest.raises(InvalidTableNameError):
        insert_rows(Dialect.SQLITE, "qmark", name, [A])


def test_statements_fit_every_drivers_placeholder_limit() -> None:
    assert ROWS_PER_STATEMENT[Dialect.SQLITE] * PARAMS_PER_ROW <= 999
    assert ROWS_PER_STATEMENT[Dialect.POSTGRES] * PARAMS_PER_ROW <= 65_535
    assert ROWS_PER_STATEMENT[Dialect.MYSQL] * PARAMS_PER_ROW <= 65_535
    statement = insert_rows(Dialect.SQLITE, "qmark", "t", [A] * ROWS_PER_STATEMENT[Dialect.SQLITE])
    assert statement.sql.count("?") == len(statement.params) <= 999


def test_unknown_paramstyles_are_refused() -> None:
    with pytest.raises(DialectError, match="paramstyle"):
        Binder("dollar")
