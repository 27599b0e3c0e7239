"""Write outboxd outbox rows from Python, inside your own database transaction.

Example (SQLite; psycopg 3 and PyMySQL connections work the same)::

    import sqlite3
    from outboxd_producer import build, enqueue

    db = sqlite3.connect("outboxd.db")
    with db:  # one transaction: committed on success, rolled back on an exception
        db.execute("INSERT INTO gifts (id, room_id) VALUES (?, ?)", (1, "room-42"))
        event = build("room-42", "RoomGiftSent", 7, None, b'{"gift":"rose"}')
        enqueue(db, event)  # True: inserted; False: that event id was already there

The row's ``envelope`` is an ``outbox.v1.EventEnvelope`` (``proto/outbox/v1/envelope.proto``)
encoded by the official protobuf runtime; the statements follow ``producers/SPEC.md``. An event
carries the W3C Trace Context of the producer's span: given explicitly, or taken by ``enqueue``
from the current OpenTelemetry span when ``opentelemetry-api`` is installed (never required).
"""

from .dialect import Dialect
from .enqueue import enqueue, enqueue_batch
from .envelope import EventEnvelope, encode_envelope
from .errors import (
    DialectError,
    InvalidEventError,
    InvalidTableNameError,
    OutboxError,
    RowCountError,
)
from .event import DEFAULT_APP_CODE, Event, build, now_ms, to_ms
from .event_id import EventIdGenerator, new_event_id
from .sql import DEFAULT_TABLE
from .trace_context import TraceContext, current_trace_context

__version__ = "0.1.0"

__all__ = [
    "DEFAULT_APP_CODE",
    "DEFAULT_TABLE",
    "Dialect",
    "DialectError",
    "Event",
    "EventEnvelope",
    "EventIdGenerator",
    "InvalidEventError",
    "InvalidTableNameError",
    "OutboxError",
    "RowCountError",
    "TraceContext",
    "build",
    "current_trace_context",
    "encode_envelope",
    "enqueue",
    "enqueue_batch",
    "new_event_id",
    "now_ms",
    "to_ms",
]
