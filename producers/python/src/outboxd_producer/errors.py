"""The exceptions this package raises. All derive from :class:`OutboxError`."""

from __future__ import annotations


class OutboxError(Exception):
    """Base class of every error raised by ``outboxd_producer`` (database errors pass through
    unchanged: they are the driver's own exceptions)."""


class InvalidEventError(OutboxError, ValueError):
    """An event that cannot be written: a field of the wrong type, empty or too long.

    Raised before anything is written. ``field`` names the offending field, ``event_id`` the event
    (``""`` when the id is the problem or not made yet); both are in the message too.
    """

    def __init__(self, message: str, *, field: str, event_id: str) -> None:
        super().__init__(message)
        self.field = field
        self.event_id = event_id


class InvalidTableNameError(OutboxError, ValueError):
    """The outbox table name is not a plain SQL identifier (``[A-Za-z_][A-Za-z0-9_]*``, at most
    64 characters). It is written into the SQL unquoted, so nothing else is accepted."""


class DialectError(OutboxError, ValueError):
    """The SQL dialect could not be told from the connection, or the given one is unknown, or the
    driver's parameter style is not supported."""


class RowCountError(OutboxError):
    """The driver did not report how many rows an INSERT wrote (``cursor.rowcount`` was ``-1``)."""
