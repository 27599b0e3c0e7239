"""The SQL this package runs: the multi-row producer INSERT of each dialect and MySQL's count of
ids already present, with their bound values in the driver's DB-API parameter style.

Same statement shapes as the host (``host/src/store/statement/insert.rs``) and the migrations'
comments::

    INSERT INTO room_outbox (app_code, event_id, event_type, room_id, status, envelope,
                             created_at_ms, retry_count, last_error, worker_id, lock_until_ms,
                             next_retry_at_ms, updated_at_ms)
    VALUES (?, ?, ?, ?, 'pending', ?, ?, 0, NULL, '', NULL, 0, ?), (…)
    ON CONFLICT (app_code, event_id) DO NOTHING           -- PostgreSQL, SQLite
    ON DUPLICATE KEY UPDATE event_id = event_id           -- MySQL / MariaDB
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .dialect import Dialect
from .errors import DialectError, InvalidTableNameError

if TYPE_CHECKING:
    from .event import Event

#: The outbox table's default name.
DEFAULT_TABLE = "room_outbox"

#: The columns every INSERT names, in migration 0001's order.
COLUMNS: tuple[str, ...] = (
    "app_code",
    "event_id",
    "event_type",
    "room_id",
    "status",
    "envelope",
    "created_at_ms",
    "retry_count",
    "last_error",
    "worker_id",
    "lock_until_ms",
    "next_retry_at_ms",
    "updated_at_ms",
)

#: Values bound per row: app_code, event_id, event_type, room_id, envelope, created_at_ms,
#: updated_at_ms (= created_at_ms).
PARAMS_PER_ROW = 7

#: Most rows in one INSERT. SQLite builds before 3.32 take at most 999 bound values per statement
#: (7 × 142 = 994); PostgreSQL (65 535) and MySQL (65 535 for prepared statements) take 500 rows.
ROWS_PER_STATEMENT: dict[Dialect, int] = {
    Dialect.POSTGRES: 500,
    Dialect.MYSQL: 500,
    Dialect.SQLITE: 999 // PARAMS_PER_ROW,
}

_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,47}")

_ON_CONFLICT: dict[Dialect, str] = {
    Dialect.POSTGRES: " ON CONFLICT (app_code, event_id) DO NOTHING",
    Dialect.SQLITE: " ON CONFLICT (app_code, event_id) DO NOTHING",
    # Not INSERT IGNORE: it would turn other errors (a value too long, …) into warnings too.
    Dialect.MYSQL: " ON DUPLICATE KEY UPDATE event_id = event_id",
}


def check_table_name(table: str) -> str:
    """``table`` when it is a plain SQL identifier (``[A-Za-z_][A-Za-z0-9_]*``, at most 48
    characters, ASCII); raises :class:`~outboxd_producer.InvalidTableNameError` otherwise."""
    if not isinstance(table, str) or _IDENTIFIER.fullmatch(table) is None:
        raise InvalidTableNameError(
            f"table name {table!r} is not a plain SQL identifier "
            "([A-Za-z_][A-Za-z0-9_]*, at most 48 characters, as the host allows)"
        )
    return table


class Binder:
    """Collects bound values and writes their placeholders in one DB-API ``paramstyle``."""

    def __init__(self, paramstyle: str) -> None:
        if paramstyle not in ("qmark", "numeric", "named", "format", "pyformat"):
            raise DialectError(f"unsupported DB-API paramstyle {paramstyle!r}")
        self._style = paramstyle
        self._values: list[object] = []

    def bind(self, value: object) -> str:
        """Adds ``value``; returns its placeholder."""
        self._values.append(value)
        n = len(self._values)
        if self._style == "qmark":
            return "?"
        if self._style == "numeric":
            return f":{n}"
        if self._style == "named":
            return f":p{n}"
        return "%s"  # format, and pyformat drivers accept %s with a sequence

    @property
    def params(self) -> Sequence[object] | Mapping[str, object]:
        """The values, as the driver's ``execute`` wants them (a dict for ``named``)."""
        if self._style == "named":
            return {f"p{i}": value for i, value in enumerate(self._values, start=1)}
        return tuple(self._values)


@dataclass(frozen=True)
class Statement:
    """One SQL statement and its bound values."""

    sql: str
    params: Sequence[object] | Mapping[str, object]

    def execute_on(self, cursor: Any) -> None:
        """Runs the statement on a DB-API cursor."""
        cursor.execute(self.sql, self.params)


def insert_rows(
    dialect: Dialect, paramstyle: str, table: str, events: Sequence[Event]
) -> Statement:
    """The multi-row INSERT of ``events`` as new ``pending`` rows of ``table``, ignoring ids already
    present (``events`` at most :data:`ROWS_PER_STATEMENT` of the dialect)."""
    b = Binder(paramstyle)
    rows = []
    for event in events:
        rows.append(
            f"({b.bind(event.app_code)}, {b.bind(event.event_id)}, {b.bind(event.event_type)}, "
            f"{b.bind(event.room_id)}, 'pending', {b.bind(event.encoded_envelope())}, "
            f"{b.bind(event.created_at_ms)}, 0, NULL, '', NULL, 0, {b.bind(event.created_at_ms)})"
        )
    sql = (
        f"INSERT INTO {check_table_name(table)} ({', '.join(COLUMNS)}) VALUES "
        + ", ".join(rows)
        + _ON_CONFLICT[dialect]
    )
    return Statement(sql, b.params)


def count_existing(
    paramstyle: str, table: str, app_code: str, event_ids: Sequence[str]
) -> Statement:
    """``SELECT COUNT(*)`` of the ids among ``event_ids`` of tenant ``app_code`` already in
    ``table``: a primary-key range read (a plain consistent read, no lock)."""
    b = Binder(paramstyle)
    app = b.bind(app_code)
    ids = ", ".join(b.bind(event_id) for event_id in event_ids)
    sql = (
        f"SELECT COUNT(*) FROM {check_table_name(table)} "
        f"WHERE app_code = {app} AND event_id IN ({ids})"
    )
    return Statement(sql, b.params)
