"""End to end, per database (producers/SPEC.md): the library writes events and a business row in
one transaction; the real host (``outboxd migrate``, ``outboxd run --drain``) delivers them through
the real webhook plugin to an HTTP server of the test, which gets every field as written, and each
event's W3C trace context (its own, or the OpenTelemetry span's it was written in) as the request
headers ``traceparent`` and ``tracestate``."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags, TraceState
from support.databases import TestDatabase
from support.host import WEBHOOK_SECRET, require_host, run_host, write_config
from support.webhook import Received, WebhookReceiver, standard_webhooks_signature

from outboxd_producer import Event, build, enqueue, enqueue_batch

APP_CODES = ["default", "live"]
ROOMS = ["room-1", "房间-2", "room-🎁-3"]
BASE_MS = 1_733_011_200_000
# The trace state of the remote parent of the test's span (W3C Trace Context's example).
SPAN_TRACESTATE = "rojo=00f067aa0ba902b7,congo=t61rcWkgMzE"
# A provider of the test's own (the global one is left alone): its spans are real SDK spans.
TRACER = TracerProvider().get_tracer(__name__)

#: An event's expected trace headers: (traceparent, tracestate), ``None`` for a header not sent.
TraceHeaders = tuple[str | None, str | None]


def explicit_trace(i: int) -> dict[str, str]:
    """The trace context of its own event ``i`` of :func:`events` is written with: a traceparent
    alone (i % 5 == 1), with a tracestate (i % 5 == 3), or none."""
    if i % 5 == 1:
        return {"traceparent": f"00-{0xE2E000 + i:032x}-{0xA000 + i:016x}-01"}
    if i % 5 == 3:
        return {
            "traceparent": f"00-{0xE2E000 + i:032x}-{0xB000 + i:016x}-00",
            "tracestate": f"rojo={i:016x},congo=t61rcWkgMzE",
        }
    return {}


def events() -> list[Event]:
    """50 events: three rooms, two tenants, generated and explicit ids, Unicode, empty and binary
    bodies, extreme integers, trace contexts of their own (with and without a tracestate) or
    none."""
    made: list[Event] = []
    for i in range(44):
        made.append(
            build(
                ROOMS[i % 3],
                ["RoomGiftSent", "RoomMicChanged", "RoomHeatChanged"][i % 3],
                i + 1,
                BASE_MS + i // 4,  # several ids per millisecond
                f'{{"seq":{i},"gift":"rose"}}'.encode(),
                app_code=APP_CODES[i % 2],
                **explicit_trace(i),
            )
        )
    made += [
        build("房间-2", "礼物Sent", 7, BASE_MS, "麦位 🎤 ünïcödé".encode(), event_id="evt_é_🎁"),
        build("room-1", "RoomGiftSent", 0, BASE_MS, b"", app_code="live", event_id="empty-body"),
        build("room-1", "RoomRankChanged", 300, BASE_MS, bytes(range(256)) * 3, event_id="binary"),
        build("room-🎁-3", "RoomGiftSent", 2**63 - 1, 2**62, b"\x00", event_id="int64-max"),
        build(
            "room-1", "RoomGiftSent", -(2**63), 0, b"\xff", app_code="live", event_id="int64-min"
        ),
        build("r" * 128, "T" * 128, -1, BASE_MS, b"long", app_code="default", event_id="e" * 128),
    ]
    assert len(made) == 50
    return made


def expected_json(event: Event) -> dict[str, Any]:
    """The webhook plugin's JSON for ``event`` on its first attempt."""
    return {
        "app_code": event.app_code,
        "event_id": event.event_id,
        "event_type": event.event_type,
        "room_id": event.room_id,
        "room_version": event.room_version,
        "occurred_at_ms": event.occurred_at_ms,
        "attempt": 1,
        "body": base64.b64encode(event.body).decode(),
    }


def remote_parent(trace_flags: int, trace_state: TraceState | None) -> Any:
    """An OpenTelemetry context whose span is a remote parent (as an incoming request's
    traceparent would give) with ``trace_flags`` and ``trace_state``."""
    parent = SpanContext(
        trace_id=0x4BF92F3577B34DA6A3CE929D0E0E4736,
        span_id=0x00F067AA0BA902B7,
        is_remote=True,
        trace_flags=TraceFlags(trace_flags),
        trace_state=trace_state,
    )
    return trace.set_span_in_context(NonRecordingSpan(parent))


def traceparent_of(span: trace.Span) -> str:
    """The W3C traceparent of ``span``, computed here from its ids and flags."""
    context = span.get_span_context()
    return f"00-{context.trace_id:032x}-{context.span_id:016x}-{context.trace_flags:02x}"


def write_in_spans(conn: Any) -> list[tuple[Event, TraceHeaders]]:
    """Writes six events in two spans of the SDK's tracer, on ``conn`` in its open transaction:
    those without a trace context of their own get the span's, the one with its own keeps it.
    Returns each event with the trace headers it must arrive with."""
    own = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"

    def gift(n: int, app_code: str, traceparent: str | None = None) -> Event:
        return build(
            "room-traced",
            "RoomGiftSent",
            n,
            BASE_MS + n,
            f"span {n}".encode(),
            app_code=app_code,
            event_id=f"in-span-{n}",
            traceparent=traceparent,
        )

    state = TraceState([("rojo", "00f067aa0ba902b7"), ("congo", "t61rcWkgMzE")])
    sampled = [gift(1, "default"), gift(2, "live"), gift(3, "default", own), gift(4, "live")]
    with TRACER.start_as_current_span("gifts", context=remote_parent(TraceFlags.SAMPLED, state)):
        span = trace.get_current_span()
        assert enqueue(conn, sampled[0]) is True
        assert enqueue_batch(conn, sampled[1:]) == 3
    in_sampled = (traceparent_of(span), SPAN_TRACESTATE)
    assert in_sampled[0].endswith("-01")
    # A parent neither sampled nor with a trace state: the child's flags are 00, no tracestate.
    unsampled = [gift(5, "default"), gift(6, "live")]
    with TRACER.start_as_current_span("more", context=remote_parent(TraceFlags.DEFAULT, None)):
        span = trace.get_current_span()
        assert enqueue_batch(conn, unsampled) == 2
    in_unsampled = (traceparent_of(span), None)
    assert in_unsampled[0].endswith("-00")
    expected: list[tuple[Event, TraceHeaders]] = [(e, in_sampled) for e in sampled]
    expected[2] = (sampled[2], (own, None))
    return expected + [(e, in_unsampled) for e in unsampled]


def trace_headers(request_: Received) -> TraceHeaders:
    """The ``traceparent`` and ``tracestate`` headers of a webhook request (``None``: absent)."""
    return request_.headers.get("traceparent"), request_.headers.get("tracestate")


def create_business_table(db: TestDatabase) -> None:
    conn = db.connect()
    try:
        conn.cursor().execute(
            "CREATE TABLE gifts (id INTEGER PRIMARY KEY, note VARCHAR(64) NOT NULL)"
        )
        conn.commit()
    finally:
        conn.close()


def query(db: TestDatabase, sql: str) -> list[tuple[Any, ...]]:
    conn = db.connect()
    try:
        cursor = conn.cursor()
        cursor.execute(sql)
        return [tuple(row) for row in cursor.fetchall()]
    finally:
        conn.close()


@pytest.mark.e2e
@pytest.mark.parametrize("kind", ["sqlite", "mariadb", "postgres"])
def test_the_host_delivers_what_the_library_wrote(
    kind: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    binary = require_host()
    db: TestDatabase = request.getfixturevalue(f"{kind}_db")
    ph = db.ph
    with WebhookReceiver() as hook:
        config = write_config(tmp_path / "outboxd.toml", db.url, APP_CODES, hook.port)
        run_host(binary, config, "migrate")
        create_business_table(db)
        written = events()

        conn = db.connect()
        cursor = conn.cursor()
        # One transaction: the business row and the events, committed together.
        cursor.execute(f"INSERT INTO gifts (id, note) VALUES ({ph}, {ph})", (1, "committed"))
        assert enqueue_batch(conn, written) == 50
        # In the same transaction, events written in OpenTelemetry spans.
        in_spans = write_in_spans(conn)
        conn.commit()
        delivered = written + [event for event, _ in in_spans]
        # A rolled-back transaction writes neither.
        ghost = build("room-1", "RoomGiftSent", 99, None, b"ghost", event_id="ghost")
        cursor.execute(f"INSERT INTO gifts (id, note) VALUES ({ph}, {ph})", (2, "rolled back"))
        assert enqueue(cursor, ghost) is True
        conn.rollback()
        # Duplicates count 0 and change nothing.
        assert enqueue(conn, written[0]) is False
        assert enqueue_batch(cursor, written[::7]) == 0
        conn.commit()
        conn.close()

        assert query(db, "SELECT id, note FROM gifts") == [(1, "committed")]
        stored = query(db, "SELECT app_code, event_id, status FROM room_outbox")
        assert sorted(stored) == sorted((e.app_code, e.event_id, "pending") for e in delivered)

        run_host(binary, config, "run", "--drain")
        received = hook.received

    # The trace headers each event must arrive with: its own trace context (written outside any
    # span), or the one of the span it was written in.
    traces: dict[tuple[str, str], TraceHeaders] = {
        (e.app_code, e.event_id): (e.traceparent, e.tracestate) for e in written
    }
    traces |= {(e.app_code, e.event_id): headers for e, headers in in_spans}
    by_id: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for request_ in received:
        assert request_.path == "/hook"
        assert request_.headers["content-type"] == "application/json"
        payload = request_.json()
        assert request_.headers["webhook-id"] == payload["event_id"]
        signature = standard_webhooks_signature(
            WEBHOOK_SECRET,
            payload["event_id"],
            request_.headers["webhook-timestamp"],
            request_.body,
        )
        assert signature in request_.headers["webhook-signature"].split(" ")
        key = (payload["app_code"], request_.headers["webhook-id"])
        # The trace context the event was written with (its own or its span's), or no header.
        assert key in traces, f"delivered an event that was not written: {key}"
        assert trace_headers(request_) == traces[key], key
        by_id.setdefault((payload["app_code"], payload["event_id"]), []).append(payload)
    assert set(by_id) == {(e.app_code, e.event_id) for e in delivered}
    for event in delivered:
        for payload in by_id[(event.app_code, event.event_id)]:
            assert payload == expected_json(event), event.event_id
        assert base64.b64decode(by_id[(event.app_code, event.event_id)][0]["body"]) == event.body
    assert len(received) == len(delivered) == 56, "each event delivered once"
    # The test traced enough: trace contexts of their own with and without a tracestate, none,
    # and the spans' (with and without one) all arrived.
    kinds = {(tp is not None, ts is not None) for tp, ts in map(trace_headers, received)}
    assert kinds == {(True, True), (True, False), (False, False)}
    assert {headers for _, headers in in_spans} <= set(map(trace_headers, received))

    statuses = query(db, "SELECT app_code, event_id, status FROM room_outbox")
    assert sorted(statuses) == sorted((e.app_code, e.event_id, "delivered") for e in delivered)


@pytest.mark.e2e
def test_the_example_writes_an_event_the_host_delivers(tmp_path: Path) -> None:
    """example.py against a database `outboxd migrate` made, as README.md shows it."""
    import subprocess
    import sys

    from support.paths import PRODUCER

    binary = require_host()
    path = tmp_path / "outboxd.db"
    with WebhookReceiver() as hook:
        config = write_config(
            tmp_path / "outboxd.toml", f"sqlite://{path}?mode=rwc", APP_CODES, hook.port
        )
        run_host(binary, config, "migrate")
        done = subprocess.run(
            [sys.executable, str(PRODUCER / "example.py"), str(path)],
            capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        event_id = done.stdout.strip()
        run_host(binary, config, "run", "--drain")
        received = hook.received
    assert len(received) == 1
    payload = received[0].json()
    assert payload["event_id"] == event_id
    # example.py writes its event outside any span and without a trace context: no trace headers.
    assert trace_headers(received[0]) == (None, None)
    assert (payload["event_type"], payload["room_id"], payload["room_version"]) == (
        "RoomGiftSent",
        "room-42",
        7,
    )
    assert base64.b64decode(payload["body"]) == b'{"gift":"rose","from":"u1","to":"u2"}'
