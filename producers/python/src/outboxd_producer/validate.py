"""The checks an event passes before it is written, alike on every database (SQLite does not
enforce ``VARCHAR`` sizes; MariaDB and PostgreSQL would reject the statement).

Lengths are counted in Unicode scalar values, as the host counts them (``str.chars()``), against
the column sizes of migration 0001. ``traceparent`` and ``tracestate`` are checked against the W3C
Trace Context format (``producers/SPEC.md``, "Trace context").
"""

from __future__ import annotations

import re
from typing import Protocol

from .errors import InvalidEventError

#: The longest value of each string column, in characters (migration 0001's ``VARCHAR`` sizes).
MAX_CHARS: dict[str, int] = {"app_code": 64, "event_id": 128, "event_type": 128, "room_id": 128}

#: The string fields that must not be empty (``event_id`` is generated when left empty).
NON_EMPTY: tuple[str, ...] = ("event_id", "event_type", "room_id")

INT64_MIN = -(1 << 63)
INT64_MAX = (1 << 63) - 1

#: The longest ``tracestate``, in characters (what W3C Trace Context asks every vendor to pass on).
MAX_TRACESTATE_CHARS = 512

#: The four parts of a ``traceparent``, in lowercase hex: version, trace id, parent id, flags.
_TRACEPARENT = re.compile(r"([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})")
_TRACEPARENT_CHARS = 55

#: The longest ``traceparent``, in characters: a later version may go on after a further ``-``,
#: to this many characters in all (``producers/SPEC.md``, "Trace context").
MAX_TRACEPARENT_CHARS = 256


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
    @property
    def traceparent(self) -> object: ...
    @property
    def tracestate(self) -> object: ...


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
    check_encodable(event, field, value)
    if field in NON_EMPTY and not value:
        raise fail(event, field, "must not be empty")
    limit = MAX_CHARS[field]
    if len(value) > limit:
        raise fail(event, field, f"is {len(value)} characters, at most {limit} fit")


def check_encodable(event: object, field: str, value: str) -> None:
    """``value`` is text that UTF-8 can encode (no lone surrogates), as protobuf strings must be."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as error:
        raise fail(
            event, field, f"is not valid Unicode text ({error.reason} at {error.start})"
        ) from None


def traceparent_problem(value: str) -> str | None:
    """Why ``value`` is not a W3C ``traceparent`` (a phrase for an error message), or ``None``
    when it is one.

    Version (2 lowercase hex digits, not ``ff``), trace id (32, not all zeros), parent id (16, not
    all zeros) and flags (2), joined by ``-``. Version ``00`` is exactly 55 characters; a later
    version may go on after a further ``-`` (a newer format this library passes on unread), to at
    most 256 characters in all.
    """
    parts = _TRACEPARENT.fullmatch(value[:_TRACEPARENT_CHARS])
    if parts is None:
        return "expected version-traceid-parentid-flags, 2-32-16-2 lowercase hex digits and '-'"
    version, trace_id, parent_id, _flags = parts.groups()
    if version == "ff":
        return "version ff is invalid"
    if trace_id == "0" * 32:
        return "the trace id is all zeros"
    if parent_id == "0" * 16:
        return "the parent id is all zeros"
    if len(value) > _TRACEPARENT_CHARS:
        if version == "00":
            return f"version 00 is exactly {_TRACEPARENT_CHARS} characters, this is {len(value)}"
        if value[_TRACEPARENT_CHARS] != "-":
            return "a later version goes on after the flags only behind a '-'"
        if len(value) > MAX_TRACEPARENT_CHARS:
            return (
                f"a later version is at most {MAX_TRACEPARENT_CHARS} characters, "
                f"this is {len(value)}"
            )
    return None


def tracestate_problem(value: str) -> str | None:
    """Why ``value`` cannot be a ``tracestate`` (at most 512 characters of printable ASCII,
    0x20–0x7e), or ``None`` when it can."""
    if len(value) > MAX_TRACESTATE_CHARS:
        return f"is {len(value)} characters, at most {MAX_TRACESTATE_CHARS} fit"
    for index, char in enumerate(value):
        if not " " <= char <= "~":
            return f"has {char!r} at {index}, only printable ASCII (0x20-0x7e) is allowed"
    return None


def _shown(value: str) -> str:
    """``value`` for an error message: its first 80 characters, quoted."""
    return repr(value if len(value) <= 80 else value[:80] + "…")


def check_trace_context(event: object, traceparent: object, tracestate: object) -> None:
    """``traceparent`` is ``None`` or a W3C traceparent; ``tracestate`` is ``None`` or a valid
    ``tracestate`` that goes with a ``traceparent``. (``Event`` turns empty strings into
    ``None``; here an empty string counts as not given too.)"""
    if traceparent is not None:
        if not isinstance(traceparent, str):
            kind = type(traceparent).__name__
            raise fail(event, "traceparent", f"must be a str or None, not {kind}")
        if traceparent:
            check_encodable(event, "traceparent", traceparent)
            problem = traceparent_problem(traceparent)
            if problem is not None:
                raise fail(
                    event,
                    "traceparent",
                    f"{_shown(traceparent)} is not a W3C traceparent: {problem}",
                )
    if tracestate is not None:
        if not isinstance(tracestate, str):
            kind = type(tracestate).__name__
            raise fail(event, "tracestate", f"must be a str or None, not {kind}")
        if tracestate:
            if not traceparent:
                raise fail(event, "tracestate", "is given without a traceparent")
            problem = tracestate_problem(tracestate)
            if problem is not None:
                raise fail(event, "tracestate", problem)


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
    check_trace_context(event, event.traceparent, event.tracestate)
