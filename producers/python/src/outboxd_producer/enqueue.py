"""``enqueue`` and ``enqueue_batch``: write events as outbox rows in the caller's transaction."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence

from .dbapi import ConnectionOrCursor, Cursor, connection_of, cursor_of, rowcount, scalar
from .dialect import Dialect, paramstyle_of, resolve_dialect
from .event import Event
from .mysql_rows import found_rows_flag, inserted_rows
from .sql import DEFAULT_TABLE, ROWS_PER_STATEMENT, check_table_name, count_existing, insert_rows
from .trace_context import current_trace_context
from .validate import validate_event


def enqueue(
    cursor_or_connection: ConnectionOrCursor,
    event: Event,
    *,
    dialect: Dialect | str | None = None,
    table: str = DEFAULT_TABLE,
) -> bool:
    """Writes ``event`` as a ``pending`` outbox row in the current transaction of
    ``cursor_or_connection`` (a DB-API connection or cursor: psycopg 3, PyMySQL, sqlite3, …).

    Returns ``True`` when the row was inserted, ``False`` when a row with the same
    ``(app_code, event_id)`` already exists (it is kept unchanged). Never commits: commit (or roll
    back) together with your business change. ``dialect`` (``"postgres"``, ``"mysql"``,
    ``"sqlite"``) is told from the driver when not given; ``table`` is the outbox table's name.

    An event without a ``traceparent`` is written with the trace context of the OpenTelemetry
    span current during this call, when ``opentelemetry-api`` is installed and a valid span is
    current (:func:`~outboxd_producer.current_trace_context`); ``event`` itself is not changed.

    Raises :class:`~outboxd_producer.InvalidEventError` before writing when a field cannot be
    stored, :class:`~outboxd_producer.InvalidTableNameError` for a table name that is not a plain
    identifier, :class:`~outboxd_producer.DialectError` when the dialect is unknown; database
    errors are the driver's.
    """
    if not isinstance(event, Event):
        raise TypeError(f"event is a {type(event).__name__}, not an outboxd_producer.Event")
    return enqueue_batch(cursor_or_connection, [event], dialect=dialect, table=table) == 1


def enqueue_batch(
    cursor_or_connection: ConnectionOrCursor,
    events: Iterable[Event],
    *,
    dialect: Dialect | str | None = None,
    table: str = DEFAULT_TABLE,
) -> int:
    """Writes ``events`` as ``pending`` outbox rows in the current transaction of
    ``cursor_or_connection``, in multi-row INSERTs; returns how many rows were inserted.

    Ids already in the table are skipped (their rows are kept unchanged), and so are repeats of an
    ``(app_code, event_id)`` within ``events``: the first one wins. Every event is checked before
    the first row is written. Events without a ``traceparent`` get the current span's, as in
    :func:`enqueue`. See :func:`enqueue` for the arguments and errors.
    """
    table = check_table_name(table)
    batch = list(events)
    for index, event in enumerate(batch):
        if not isinstance(event, Event):
            raise TypeError(
                f"events[{index}] is a {type(event).__name__}, not an outboxd_producer.Event"
            )
        validate_event(event)
    batch = with_current_trace_context(batch)
    resolved = resolve_dialect(cursor_or_connection, dialect)
    paramstyle = paramstyle_of(cursor_or_connection)
    rows = distinct(batch)
    if not rows:
        return 0
    size = ROWS_PER_STATEMENT[resolved]
    inserted = 0
    with cursor_of(cursor_or_connection) as cursor:
        for start in range(0, len(rows), size):
            chunk = rows[start : start + size]
            if resolved is Dialect.MYSQL:
                inserted += _insert_mysql(cursor_or_connection, cursor, paramstyle, table, chunk)
            else:
                insert_rows(resolved, paramstyle, table, chunk).execute_on(cursor)
                inserted += rowcount(cursor)
    return inserted


def with_current_trace_context(events: list[Event]) -> list[Event]:
    """``events``, those without a ``traceparent`` replaced by copies carrying the current span's
    trace context (:func:`~outboxd_producer.current_trace_context`, asked once); ``events``
    itself when every event has one or no span is current."""
    if all(event.traceparent for event in events):
        return events
    context = current_trace_context()
    if context is None:
        return events
    return [
        event
        if event.traceparent
        else dataclasses.replace(
            event, traceparent=context.traceparent, tracestate=context.tracestate
        )
        for event in events
    ]


def distinct(events: Sequence[Event]) -> list[Event]:
    """``events`` without repeats of an ``(app_code, event_id)``: the first of each, in order."""
    seen: set[tuple[str, str]] = set()
    first: list[Event] = []
    for event in events:
        key = (event.app_code, event.event_id)
        if key not in seen:
            seen.add(key)
            first.append(event)
    return first


def _insert_mysql(
    origin: ConnectionOrCursor, cursor: Cursor, paramstyle: str, table: str, chunk: list[Event]
) -> int:
    """Inserts one chunk on MySQL/MariaDB; the count is right whatever ``CLIENT_FOUND_ROWS`` says
    (see :mod:`outboxd_producer.mysql_rows`)."""
    existing = 0
    if found_rows_flag(connection_of(origin)) is not False:
        by_app: dict[str, list[str]] = {}
        for event in chunk:
            by_app.setdefault(event.app_code, []).append(event.event_id)
        for app_code, ids in by_app.items():
            count_existing(paramstyle, table, app_code, ids).execute_on(cursor)
            existing += scalar(cursor)
    insert_rows(Dialect.MYSQL, paramstyle, table, chunk).execute_on(cursor)
    return inserted_rows(rowcount(cursor), len(chunk), existing)
