"""The parts of DB-API 2.0 (PEP 249) this package uses: a cursor's ``execute``, ``rowcount`` and
``fetchone``, a connection's ``cursor()``; and getting a cursor from either."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any, Protocol, TypeAlias

from .errors import RowCountError


class Cursor(Protocol):
    """A DB-API cursor (``sqlite3.Cursor``, ``psycopg.Cursor``, ``pymysql.cursors.Cursor``, …)."""

    @property
    def rowcount(self) -> int:
        """Rows the last statement wrote."""
        ...

    def execute(self, operation: Any, parameters: Any = ..., /) -> Any:
        """Runs one statement."""
        ...

    def fetchone(self) -> Any:
        """The next row of the last query."""
        ...


class Connection(Protocol):
    """A DB-API connection (``sqlite3.Connection``, ``psycopg.Connection``,
    ``pymysql.connections.Connection``, …)."""

    def cursor(self) -> Any:
        """A new cursor."""
        ...


#: What ``enqueue`` and ``enqueue_batch`` take: a connection or a cursor.
ConnectionOrCursor: TypeAlias = Connection | Cursor


def is_connection(obj: object) -> bool:
    """Whether ``obj`` is a connection (it makes cursors) rather than a cursor."""
    return callable(getattr(obj, "cursor", None))


def connection_of(obj: object) -> object:
    """The connection of ``obj``: ``obj`` itself, or a cursor's ``connection`` (``None`` when the
    driver does not offer that DB-API extension)."""
    return obj if is_connection(obj) else getattr(obj, "connection", None)


@contextmanager
def cursor_of(obj: ConnectionOrCursor) -> Iterator[Cursor]:
    """A cursor on ``obj``: a new one (closed afterwards) when ``obj`` is a connection, else ``obj``
    itself (left open). The caller's transaction is never committed or rolled back here."""
    if not is_connection(obj):
        yield obj  # type: ignore[misc]
        return
    cursor = obj.cursor()  # type: ignore[union-attr]
    try:
        yield cursor
    finally:
        cursor.close()


def rowcount(cursor: Cursor) -> int:
    """The rows the last statement on ``cursor`` wrote; raises
    :class:`~outboxd_producer.errors.RowCountError` when the driver does not know."""
    count = cursor.rowcount
    if not isinstance(count, int) or count < 0:
        raise RowCountError(f"the driver reported rowcount {count!r} for an INSERT")
    return count


def scalar(cursor: Cursor) -> int:
    """The single integer the last query on ``cursor`` returned (a tuple or a dict row)."""
    row = cursor.fetchone()
    if isinstance(row, Mapping):
        row = tuple(row.values())
    if not row:
        raise RowCountError("a COUNT(*) query returned no row")
    return int(row[0])
