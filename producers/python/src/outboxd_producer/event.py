"""The event a producer writes (:class:`Event`) and the :func:`build` helper."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Protocol, runtime_checkable

from .envelope import encode_envelope
from .event_id import new_event_id
from .validate import check_int64, fail, validate_event

#: The tenant used when an event does not name one.
DEFAULT_APP_CODE = "default"

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_ONE_MS = timedelta(milliseconds=1)


def now_ms() -> int:
    """Now, in UTC milliseconds since the Unix epoch."""
    return time.time_ns() // 1_000_000


def to_ms(when: datetime | int | None) -> int:
    """UTC milliseconds since the Unix epoch of ``when``: a timezone-aware ``datetime`` (rounded
    down to the millisecond), an ``int`` (already milliseconds) or ``None`` (now).

    A naive ``datetime`` is refused: its time zone is unknown.
    """
    if when is None:
        return now_ms()
    if isinstance(when, datetime):
        if when.utcoffset() is None:
            raise ValueError(
                "occurred_at is a naive datetime: give it a time zone, "
                "e.g. datetime.now(timezone.utc)"
            )
        return (when - _EPOCH) // _ONE_MS
    if isinstance(when, int) and not isinstance(when, bool):
        return when
    raise TypeError(
        f"occurred_at must be a datetime, an int (ms) or None, not {type(when).__name__}"
    )


@runtime_checkable
class SerializableMessage(Protocol):
    """What :func:`build` accepts as a body besides bytes: any protobuf message."""

    def SerializeToString(self) -> bytes:
        """The message's wire bytes."""
        ...


@dataclass(frozen=True, slots=True)
class Event:
    """One event to write as an outbox row.

    Fields: ``room_id``, ``event_type`` (the routing key, e.g. ``RoomGiftSent``), ``room_version``
    (int64, the room's version after this event), ``body`` (opaque bytes, usually a serialized
    protobuf message; a ``bytearray`` or ``memoryview`` is copied to ``bytes``), ``app_code`` (the
    tenant, default ``"default"``), ``event_id`` (the idempotency key; a new time-ordered id from
    :func:`~outboxd_producer.new_event_id` when left empty) and ``occurred_at_ms`` (UTC
    milliseconds, default now; also the row's ``created_at_ms``).

    ``traceparent`` and ``tracestate`` (keyword only, default ``None``) are the W3C Trace Context
    of the producer's span, carried in the envelope. When ``traceparent`` is not given (``None``
    or ``""``, which is kept as ``None``), :func:`~outboxd_producer.enqueue` takes the current
    OpenTelemetry span's context if ``opentelemetry-api`` is installed
    (:func:`~outboxd_producer.current_trace_context`). A ``tracestate`` needs a ``traceparent``.

    Construction checks every field and raises :class:`~outboxd_producer.InvalidEventError`
    naming the field and the event when one cannot be written.
    """

    room_id: str
    event_type: str
    room_version: int
    body: bytes = b""
    app_code: str = DEFAULT_APP_CODE
    event_id: str = ""
    occurred_at_ms: int = field(default_factory=now_ms)
    traceparent: str | None = field(default=None, kw_only=True)
    tracestate: str | None = field(default=None, kw_only=True)

    def __post_init__(self) -> None:
        body: object = self.body
        if isinstance(body, (bytearray, memoryview)):
            object.__setattr__(self, "body", bytes(body))
        elif not isinstance(body, bytes):
            hint = (
                " (serialize it, or use build())" if isinstance(body, SerializableMessage) else ""
            )
            raise fail(self, "body", f"must be bytes, not {type(body).__name__}{hint}")
        if self.event_id == "":
            check_int64(self, "occurred_at_ms", self.occurred_at_ms)
            object.__setattr__(self, "event_id", new_event_id(self.occurred_at_ms))
        # An empty trace context field is one not given (proto3 writes neither).
        if self.traceparent == "":
            object.__setattr__(self, "traceparent", None)
        if self.tracestate == "":
            object.__setattr__(self, "tracestate", None)
        validate_event(self)

    @property
    def created_at_ms(self) -> int:
        """The row's ``created_at_ms`` (claim order): ``occurred_at_ms``, as the host's
        ``Record::build`` sets it."""
        return self.occurred_at_ms

    def encoded_envelope(self) -> bytes:
        """The serialized ``outbox.v1.EventEnvelope`` stored in the row's ``envelope`` column; its
        ``app_code`` and ``event_id`` are the row's. Its trace context is this event's own; for an
        event without one, :func:`~outboxd_producer.enqueue` writes the current span's instead."""
        return encode_envelope(
            app_code=self.app_code,
            event_id=self.event_id,
            room_id=self.room_id,
            event_type=self.event_type,
            room_version=self.room_version,
            occurred_at_ms=self.occurred_at_ms,
            body=self.body,
            traceparent=self.traceparent or "",
            tracestate=self.tracestate or "",
        )


def build(
    room_id: str,
    event_type: str,
    room_version: int,
    occurred_at: datetime | int | None,
    body: bytes | bytearray | memoryview | SerializableMessage,
    *,
    app_code: str = DEFAULT_APP_CODE,
    event_id: str = "",
    traceparent: str | None = None,
    tracestate: str | None = None,
) -> Event:
    """An :class:`Event` with a new time-ordered id (unless ``event_id`` is given).

    ``occurred_at`` is a timezone-aware ``datetime``, UTC milliseconds, or ``None`` for now;
    ``body`` is bytes or a protobuf message (serialized here). Give ``event_id`` a value derived
    from the command (e.g. ``f"gift-{order_id}"``) to make retrying the command write the event
    only once. ``traceparent`` / ``tracestate`` set the event's trace context; left out, enqueueing
    takes the current OpenTelemetry span's (see :class:`Event`).
    """
    payload = body.SerializeToString() if isinstance(body, SerializableMessage) else body
    return Event(
        room_id=room_id,
        event_type=event_type,
        room_version=room_version,
        body=payload,  # type: ignore[arg-type]  # bytearray/memoryview are copied to bytes
        app_code=app_code,
        event_id=event_id,
        occurred_at_ms=to_ms(occurred_at),
        traceparent=traceparent,
        tracestate=tracestate,
    )
