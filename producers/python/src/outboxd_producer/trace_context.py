"""The W3C Trace Context of the current OpenTelemetry span, taken when the application uses
OpenTelemetry (the ``opentelemetry-api`` package is importable) and never a dependency of this
package: without it, :func:`current_trace_context` is ``None`` and nothing else changes.

``opentelemetry`` is imported the first time a trace context is asked for, once: the outcome of
that attempt (the module, or none) is kept for the life of the process.
"""

from __future__ import annotations

import functools
import importlib
from types import ModuleType
from typing import NamedTuple

from .validate import MAX_TRACESTATE_CHARS, tracestate_problem

#: A ``tracestate`` list member longer than this is the first to go when the header must be cut
#: to :data:`~outboxd_producer.validate.MAX_TRACESTATE_CHARS` (W3C Trace Context, "tracestate
#: Limits").
_LONG_MEMBER_CHARS = 128


class TraceContext(NamedTuple):
    """A span's W3C Trace Context: the ``traceparent`` header value and the ``tracestate`` that
    goes with it (``None`` when the span has none)."""

    traceparent: str
    tracestate: str | None


@functools.cache
def _opentelemetry_trace() -> ModuleType | None:
    """``opentelemetry.trace``, or ``None`` when it cannot be imported (imported on the first
    call only; ``cache_clear()`` forgets the outcome, for tests)."""
    try:
        return importlib.import_module("opentelemetry.trace")
    except ImportError:
        return None


def current_trace_context() -> TraceContext | None:
    """The trace context of OpenTelemetry's current span
    (``opentelemetry.trace.get_current_span().get_span_context()``), or ``None`` when
    ``opentelemetry-api`` is not installed or no valid span is current.

    ``traceparent`` is ``00-<trace id>-<span id>-<flags>`` in lowercase hex; ``tracestate`` is the
    span's trace state serialized (``to_header()``), cut to 512 characters by whole list members
    as W3C Trace Context says (members over 128 characters first, then from the end), or ``None``
    when empty. :func:`~outboxd_producer.enqueue` fills an event's trace context from this when
    the event has no ``traceparent`` of its own.
    """
    trace = _opentelemetry_trace()
    if trace is None:
        return None
    span_context = trace.get_current_span().get_span_context()
    if not span_context.is_valid:
        return None
    traceparent = (
        f"00-{span_context.trace_id:032x}-{span_context.span_id:016x}"
        f"-{span_context.trace_flags:02x}"
    )
    state = span_context.trace_state
    header = state.to_header() if state is not None else ""
    tracestate = fit_tracestate(header)
    return TraceContext(traceparent, tracestate or None)


def fit_tracestate(header: str) -> str:
    """``header`` (a serialized ``tracestate``) cut to at most 512 characters by dropping whole
    list members: those over 128 characters first, last first, then from the end. ``""`` when
    what is left is not printable ASCII (an event must not fail for a span's trace state)."""
    if len(header) > MAX_TRACESTATE_CHARS:
        members = [member.strip() for member in header.split(",") if member.strip()]
        while len(",".join(members)) > MAX_TRACESTATE_CHARS:
            long = [i for i, member in enumerate(members) if len(member) > _LONG_MEMBER_CHARS]
            members.pop(long[-1] if long else -1)
        header = ",".join(members)
    return "" if tracestate_problem(header) is not None else header
