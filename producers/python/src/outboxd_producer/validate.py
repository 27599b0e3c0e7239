"""The checks an event passes before it is written, alike on every database (SQLite does not
enforce ``VARCHAR`` sizes; MariaDB and PostgreSQL would reject the statement).

Lengths are counted in Unicode scalar values, as the host counts them (``str.chars()``), against
the column sizes of migration 0001.
"""

from __future__ import annotations

from typing import Protocol

from .errors import InvalidEventError

#: The longest value of each string column, in characters (migration 0001's ``VARCHAR`` sizes).
MAX_CHARS: dict[str, int] = {"app_code": 64, "event_id": 128, "event_type": 128, "room_id": 128}

#: The string fields that must not be empty (``event_id`` is generated when left empty).
NON_EMPTY: tuple[str, ...] = ("event_id", "event_type", "room_id")

INT64_MIN = -(1 << 63)
INT64_MAX = (1 << 63) - 1


class EventFields(Protocol):
    """The fields :func:`validate_event` reads: those of an :class:`~outboxd_producer.Event`.
    (A protocol, so that this module, which ``event`` uses, does not import ``event``.)"""

    @property
    def app_code(self) -> object: ...
    @property
    def event_id(self) -> object: ...
    @property
    def event_type(self) -> object: ...
    @property
    def room_id(self) -> object: ...
    @property
    def room_version(self) -> object: ...
    @property
    def occurred_at_ms(self) -> object: ...
    @property
    def body(self) -> object: ...


def describe(event_id: object, event_type: object = "", room_id: object = "") -> str:
    """How error messages name an event: its id (first 40 characters), type and room."""
    name = event_id if isinstance(event_id, str) else ""
    if len(name) > 40:
        name = name[:40] + "…"
    parts = [f"event {name!r}" if name else "new event"]
    if isinstance(event_type, str) and event_type:
        parts.append(f"type {event_type[:40]!r}")
    if isinstance(room_id, str) and room_id:
        parts.append(f"room {room_id[:40]!r}")
    return ", ".join(parts)


def fail(event: object, field: str, problem: str) -> InvalidEventError:
    """The :class:`InvalidEventError` for ``field`` of ``event``: ``problem`` and the event."""
    event_id = getattr(event, "event_id", "")
    who = describe(event_id, getattr(event, "event_type", ""), getattr(event, "room_id", ""))
    return InvalidEventError(
        f"{field} {problem} ({who})",
        field=field,
        event_id=event_id if isinstance(event_id, str) else "",
    )


def check_text(event: object, field: str, value: object) -> None:
    """``value`` is a ``str`` that UTF-8 can encode, within its column size (and non-empty where
    required)."""
    if not isinstance(value, str):
        raise fail(event, field, f"must be a str, not {type(value).__name__}")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as error:
        raise fail(
            event, field, f"is not valid Unicode text ({error.reason} at {error.start})"
        ) from None
    if field in NON_EMPTY and not value:
        raise fail(event, field, "must not be empty")
    limit = MAX_CHARS[field]
    if len(value) > limit:
        raise fail(event, field, f"is {len(value)} characters, at most {limit} fit")


def check_int64(event: object, field: str, value: object) -> None:
    """``value`` is an ``int`` (not a ``bool``) that fits a signed 64-bit integer."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise fail(event, field, f"must be an int, not {type(value).__name__}")
    if not INT64_MIN <= value <= INT64_MAX:
        raise fail(event, field, f"is {value}, outside the signed 64-bit range")


def validate_event(event: EventFields) -> None:
    """Raises :class:`InvalidEventError` naming the first field of ``event`` that cannot be
    written; returns ``None`` when every field fits."""
    for field in ("app_code", "event_id", "event_type", "room_id"):
        check_text(event, field, getattr(event, field))
    check_int64(event, "room_version", event.room_version)
    check_int64(event, "occurred_at_ms", event.occurred_at_ms)
    if not isinstance(event.body, bytes):
        raise fail(event, "body", f"must be bytes, not {type(event.body).__name__}")
