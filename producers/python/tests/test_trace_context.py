"""The trace context enqueue takes from the current OpenTelemetry span (real spans of the
opentelemetry-sdk, a test-only requirement), explicit values winning over it, and the library
without opentelemetry installed."""

from __future__ import annotations

import importlib
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags, TraceState
from support.databases import TestDatabase, create_outbox_table
from support.paths import PRODUCER

from outboxd_producer import (
    Event,
    EventEnvelope,
    TraceContext,
    current_trace_context,
    enqueue,
    enqueue_batch,
)
from outboxd_producer import trace_context as trace_context_module
from outboxd_producer.trace_context import fit_tracestate

GOLDEN_TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
STATE = "rojo=00f067aa0ba902b7,congo=t61rcWkgMzE"

# A provider of the test's own: the global one is left alone (start_as_current_span makes the span
# current in OpenTelemetry's context whichever provider made it).
TRACER = TracerProvider().get_tracer(__name__)


@pytest.fixture(autouse=True)
def fresh_import_attempt() -> Iterator[None]:
    """Each test starts, and leaves, with the import of opentelemetry not tried yet."""
    trace_context_module._opentelemetry_trace.cache_clear()
    yield
    trace_context_module._opentelemetry_trace.cache_clear()


def forget_opentelemetry(monkeypatch: pytest.MonkeyPatch) -> None:
    """opentelemetry as if it were not installed: importing it fails (``None`` entries in
    ``sys.modules``), and the cached outcome of the import attempt is forgotten."""
    monkeypatch.setitem(sys.modules, "opentelemetry", None)
    monkeypatch.setitem(sys.modules, "opentelemetry.trace", None)
    trace_context_module._opentelemetry_trace.cache_clear()


def count_imports(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The names ``importlib.import_module`` is asked for from now on (those of opentelemetry)."""
    calls: list[str] = []
    real = importlib.import_module

    def counting(name: str, package: str | None = None) -> Any:
        if name.split(".")[0] == "opentelemetry":
            calls.append(name)
        return real(name, package)

    monkeypatch.setattr(importlib, "import_module", counting)
    return calls


def expected_traceparent(span: trace.Span) -> str:
    context = span.get_span_context()
    return f"00-{context.trace_id:032x}-{context.span_id:016x}-{context.trace_flags:02x}"


def remote_parent(trace_state: TraceState) -> Any:
    """An OpenTelemetry context whose span is a remote parent with ``trace_state``."""
    parent = SpanContext(
        trace_id=0x4BF92F3577B34DA6A3CE929D0E0E4736,
        span_id=0x00F067AA0BA902B7,
        is_remote=True,
        trace_flags=TraceFlags(TraceFlags.SAMPLED),
        trace_state=trace_state,
    )
    return trace.set_span_in_context(NonRecordingSpan(parent))


def event(
    event_id: str = "e-1", *, traceparent: str | None = None, tracestate: str | None = None
) -> Event:
    return Event(
        "room-1",
        "RoomGiftSent",
        1,
        b"x",
        event_id=event_id,
        occurred_at_ms=1,
        traceparent=traceparent,
        tracestate=tracestate,
    )


def written(db: TestDatabase) -> dict[str, EventEnvelope]:
    """The envelopes in ``room_outbox``, by event id."""
    conn = db.connect()
    try:
        cursor = conn.cursor()
        cursor.execute("SELECT event_id, envelope FROM room_outbox")
        found = cursor.fetchall()
    finally:
        conn.close()
    return {event_id: EventEnvelope.FromString(bytes(envelope)) for event_id, envelope in found}


def write(db: TestDatabase, *events: Event) -> dict[str, EventEnvelope]:
    """Enqueues ``events`` (one: enqueue, more: enqueue_batch), commits, and reads them back."""
    conn = db.connect()
    if len(events) == 1:
        assert enqueue(conn, events[0]) is True
    else:
        assert enqueue_batch(conn, events) == len(events)
    conn.commit()
    conn.close()
    return written(db)


@pytest.fixture
def sqlite_outbox(sqlite_db: TestDatabase) -> TestDatabase:
    create_outbox_table(sqlite_db)
    return sqlite_db


def test_enqueue_takes_the_current_span(outbox_db: TestDatabase) -> None:
    plain = event()
    with TRACER.start_as_current_span("gift") as span:
        envelope = write(outbox_db, plain)["e-1"]
    traceparent = expected_traceparent(span)
    assert envelope.traceparent == traceparent
    assert envelope.tracestate == ""
    assert traceparent.startswith(f"00-{span.get_span_context().trace_id:032x}-")
    # The caller's event is not changed; the rest of the envelope is its own.
    assert plain.traceparent is None
    envelope.ClearField("traceparent")
    assert envelope.SerializeToString(deterministic=True) == plain.encoded_envelope()


def test_the_span_s_trace_state_is_taken_too(sqlite_outbox: TestDatabase) -> None:
    state = TraceState.from_header([STATE])
    with TRACER.start_as_current_span("gift", context=remote_parent(state)) as span:
        assert current_trace_context() == TraceContext(expected_traceparent(span), STATE)
        envelope = write(sqlite_outbox, event())["e-1"]
    assert envelope.traceparent == expected_traceparent(span)
    assert envelope.traceparent.startswith("00-4bf92f3577b34da6a3ce929d0e0e4736-")
    assert envelope.tracestate == STATE


def test_an_explicit_trace_context_wins_over_the_span(sqlite_outbox: TestDatabase) -> None:
    state = TraceState.from_header([STATE])
    with TRACER.start_as_current_span("gift", context=remote_parent(state)):
        found = write(
            sqlite_outbox,
            event("both", traceparent=GOLDEN_TRACEPARENT, tracestate="mine=1"),
            # The span's trace state is not mixed into an explicit traceparent.
            event("parent-only", traceparent=GOLDEN_TRACEPARENT),
        )
    assert (found["both"].traceparent, found["both"].tracestate) == (GOLDEN_TRACEPARENT, "mine=1")
    assert (found["parent-only"].traceparent, found["parent-only"].tracestate) == (
        GOLDEN_TRACEPARENT,
        "",
    )


def test_an_empty_traceparent_takes_the_span(sqlite_outbox: TestDatabase) -> None:
    with TRACER.start_as_current_span("gift") as span:
        envelope = write(sqlite_outbox, event(traceparent="", tracestate=""))["e-1"]
    assert envelope.traceparent == expected_traceparent(span)


def test_a_batch_fills_only_the_events_without_one(sqlite_outbox: TestDatabase) -> None:
    with TRACER.start_as_current_span("gifts") as span:
        found = write(
            sqlite_outbox,
            event("a"),
            event("b", traceparent=GOLDEN_TRACEPARENT),
            event("c"),
        )
    assert {event_id: envelope.traceparent for event_id, envelope in found.items()} == {
        "a": expected_traceparent(span),
        "b": GOLDEN_TRACEPARENT,
        "c": expected_traceparent(span),
    }


def test_nothing_is_taken_when_no_span_is_current(sqlite_outbox: TestDatabase) -> None:
    assert trace.get_current_span().get_span_context().is_valid is False
    assert current_trace_context() is None
    plain = event()
    envelope = write(sqlite_outbox, plain)["e-1"]
    assert (envelope.traceparent, envelope.tracestate) == ("", "")
    assert envelope.SerializeToString(deterministic=True) == plain.encoded_envelope()


def test_an_invalid_current_span_is_not_taken() -> None:
    with trace.use_span(trace.INVALID_SPAN):
        assert current_trace_context() is None


def test_the_span_current_at_enqueue_counts_not_at_build(sqlite_outbox: TestDatabase) -> None:
    with TRACER.start_as_current_span("built"):
        made = event()
    with TRACER.start_as_current_span("written") as span:
        envelope = write(sqlite_outbox, made)["e-1"]
    assert envelope.traceparent == expected_traceparent(span)


def test_opentelemetry_is_imported_once(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = count_imports(monkeypatch)
    with TRACER.start_as_current_span("gift"):
        for _ in range(3):
            assert current_trace_context() is not None
    assert calls == ["opentelemetry.trace"]


def test_without_opentelemetry_nothing_is_taken(
    sqlite_outbox: TestDatabase, monkeypatch: pytest.MonkeyPatch
) -> None:
    with TRACER.start_as_current_span("gift"), monkeypatch.context() as patch:
        assert current_trace_context() is not None
        forget_opentelemetry(patch)  # while a span is current: nothing must see it
        calls = count_imports(patch)
        assert current_trace_context() is None
        assert current_trace_context() is None
        found = write(
            sqlite_outbox, event("plain"), event("explicit", traceparent=GOLDEN_TRACEPARENT)
        )
    assert calls == ["opentelemetry.trace"]  # the failed attempt is cached too
    assert found["plain"].traceparent == ""
    assert found["explicit"].traceparent == GOLDEN_TRACEPARENT


def run_python(code: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code), *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd=PRODUCER,
    )


def test_the_library_works_where_opentelemetry_is_not_installed(
    sqlite_outbox: TestDatabase,
) -> None:
    """A fresh interpreter where importing opentelemetry fails, as when it is not installed."""
    path = sqlite_outbox.url.removeprefix("sqlite://").removesuffix("?mode=rwc")
    done = run_python(
        """
        import sqlite3
        import sys

        class NotInstalled:
            def find_spec(self, name, path=None, target=None):
                if name.split(".")[0] == "opentelemetry":
                    raise ModuleNotFoundError(f"No module named {name!r}", name=name)
                return None

        sys.meta_path.insert(0, NotInstalled())
        import outboxd_producer as producer

        assert producer.current_trace_context() is None
        db = sqlite3.connect(sys.argv[1])
        with db:
            event = producer.build("room-1", "RoomGiftSent", 1, 1, b"x", event_id="e-1")
            assert producer.enqueue(db, event)
        db.close()
        print("written")
        """,
        path,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "written"
    envelope = written(sqlite_outbox)["e-1"]
    assert (envelope.traceparent, envelope.tracestate) == ("", "")


def test_importing_the_library_does_not_import_opentelemetry() -> None:
    done = run_python(
        """
        import sys
        import outboxd_producer

        loaded = lambda: sorted(n for n in sys.modules if n.split(".")[0] == "opentelemetry")
        print(loaded())
        outboxd_producer.current_trace_context()
        print(loaded() != [])
        """
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n")[:2] == ["[]", "True"]


def test_a_long_trace_state_is_cut_by_whole_members(sqlite_outbox: TestDatabase) -> None:
    members = [(f"k{i}", f"{i}" * 100) for i in range(8)]  # 8 × 103 characters, 831 with commas
    state = TraceState(members)
    assert len(state.to_header()) > 512
    with TRACER.start_as_current_span("gift", context=remote_parent(state)):
        envelope = write(sqlite_outbox, event())["e-1"]
    assert envelope.tracestate == ",".join(f"{key}={value}" for key, value in members[:4])


def test_fit_tracestate() -> None:
    short = "a=1,b=2"
    assert fit_tracestate(short) == short
    assert fit_tracestate("") == ""
    exactly = "k=" + "v" * 510
    assert fit_tracestate(exactly) == exactly
    long_member = "big=" + "x" * 200
    members = [f"m{i}={i:0>60}" for i in range(7)]  # 7 × 63 characters
    header = ",".join([members[0], long_member, *members[1:]])
    # Over 512: the member over 128 characters goes first, then that is short enough.
    assert fit_tracestate(header) == ",".join(members)
    members = [f"m{i}={i:0>100}" for i in range(6)]
    # No long member: from the end (spaces around members are dropped when it is rebuilt).
    assert fit_tracestate(" , ".join(members)) == ",".join(members[:4])
    # What could not be a tracestate is dropped rather than failing the event.
    assert fit_tracestate("k=v\n") == ""
