"""Time-ordered event ids: ``evt_`` + 13 hex digits of milliseconds + a 16-hex-digit tail.

The tail is random for the first id of a millisecond and the previous tail + 1 for the next ids of
the same millisecond made by the same generator, so ids made in one millisecond sort in the order
they were made (the host's ``record::new_event_id``, a monotonic ULID). The module-level
:func:`new_event_id` uses one generator per process shared by all threads (a lock guards it) and
reset in a child after ``os.fork()``, so two forked workers never continue the same sequence.
"""

from __future__ import annotations

import os
import secrets
import threading
from collections.abc import Callable

_TAIL_MAX = (1 << 64) - 1


def _random_tail() -> int:
    return secrets.randbits(64)


class EventIdGenerator:
    """A thread-safe source of time-ordered event ids (see the module docs).

    ``random_tail`` returns the first tail of a millisecond (an int in ``[0, 2**64)``); it defaults
    to 64 bits from :mod:`secrets`.
    """

    def __init__(self, random_tail: Callable[[], int] = _random_tail) -> None:
        self._random_tail = random_tail
        self._lock = threading.Lock()
        self._last_ms = -1
        self._last_tail = 0

    def new(self, ms: int) -> str:
        """A new id for UTC millisecond ``ms`` (negative values clamp to 0)."""
        if isinstance(ms, bool) or not isinstance(ms, int):
            raise TypeError(f"event id milliseconds must be an int, not {type(ms).__name__}")
        ms = max(ms, 0)
        with self._lock:
            if ms == self._last_ms and self._last_tail < _TAIL_MAX:
                tail = self._last_tail + 1
            else:
                # A new millisecond, or (after 2**64 ids in one) a fresh start as the host does.
                tail = self._random_tail() & _TAIL_MAX
            self._last_ms = ms
            self._last_tail = tail
        return f"evt_{ms:013x}{tail:016x}"

    def reset(self) -> None:
        """Forgets the last id (the next one starts from a random tail) and replaces the lock."""
        self._lock = threading.Lock()
        self._last_ms = -1
        self._last_tail = 0


_DEFAULT = EventIdGenerator()
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_DEFAULT.reset)


def new_event_id(ms: int) -> str:
    """A new event id for UTC millisecond ``ms``: ``evt_`` + ``ms`` as 13 lowercase hex digits
    + 16 lowercase hex digits. Ids made for one millisecond in this process sort in the order they
    were made, across threads. Negative ``ms`` clamp to 0.

    >>> new_event_id(1_700_000_000_000)[:17]
    'evt_0018bcfe56800'
    """
    return _DEFAULT.new(ms)
