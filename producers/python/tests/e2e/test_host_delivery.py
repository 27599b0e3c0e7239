"""End to end, per database (producers/SPEC.md): the library writes events and a business row in
one transaction; the real host (``outboxd migrate``, ``outboxd run --drain``) delivers them through
the real webhook plugin to an HTTP server of the test, which gets every field as written."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import pytest
from support.databases import TestDatabase
from support.host import WEBHOOK_SECRET, require_host, run_host, write_config
from support.webhook import WebhookReceiver, standard_webhooks_signature

from outboxd_producer import Event, build, enqueue, enqueue_batch

APP_CODES = ["default", "live"]
ROOMS = ["room-1", "房间-2", "room-🎁-3"]
BASE_MS = 1_733_011_200_000


def events() -> list[Event]:
    """50 events: three rooms, two tenants, generated and explicit ids, Unicode, empty and binary
    bodies, extreme integers."""
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
        conn.commit()
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
        assert sorted(stored) == sorted((e.app_code, e.event_id, "pending") for e in written)

        run_host(binary, config, "run", "--drain")
        received = hook.received

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
        by_id.setdefault((payload["app_code"], payload["event_id"]), []).append(payload)
    assert set(by_id) == {(e.app_code, e.event_id) for e in written}
    for event in written:
        for payload in by_id[(event.app_code, event.event_id)]:
            assert payload == expected_json(event), event.event_id
        assert base64.b64decode(by_id[(event.app_code, event.event_id)][0]["body"]) == event.body
    assert len(received) == 50, "each event delivered once"

    statuses = query(db, "SELECT app_code, event_id, status FROM room_outbox")
    assert sorted(statuses) == sorted((e.app_code, e.event_id, "delivered") for e in written)


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
    assert (payload["event_type"], payload["room_id"], payload["room_version"]) == (
        "RoomGiftSent",
        "room-42",
        7,
    )
    assert base64.b64decode(payload["body"]) == b'{"gift":"rose","from":"u1","to":"u2"}'
