"""Event and build(): defaults, ids, times, bodies."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta, timezone

import pytest

from outboxd_producer import DEFAULT_APP_CODE, Event, EventEnvelope, build, now_ms, to_ms


def test_build_fills_the_defaults() -> None:
    before = now_ms()
    event = build("room-42", "RoomGiftSent", 7, None, b"rose")
    after = now_ms()
    assert event.app_code == DEFAULT_APP_CODE == "default"
    assert before <= event.occurred_at_ms <= after
    assert event.created_at_ms == event.occurred_at_ms
    assert event.event_id.startswith(f"evt_{event.occurred_at_ms:013x}")
    assert (event.room_id, event.event_type, event.room_version, event.body) == (
        "room-42",
        "RoomGiftSent",
        7,
        b"rose",
    )


def test_build_takes_an_app_code_and_an_event_id() -> None:
    event = build("r", "T", 1, 5, b"", app_code="live", event_id="gift-1")
    assert (event.app_code, event.event_id, event.occurred_at_ms) == ("live", "gift-1", 5)


def test_the_id_is_made_from_occurred_at() -> None:
    event = build("r", "T", 1, 1_700_000_000_000, b"")
    assert event.event_id.startswith("evt_0018bcfe56800")


def test_aware_datetimes_become_utc_milliseconds() -> None:
    utc = datetime(2023, 11, 14, 22, 13, 20, 999_999, tzinfo=UTC)
    assert to_ms(utc) == 1_700_000_000_999  # rounded down
    shanghai = utc.astimezone(timezone(timedelta(hours=8)))
    assert to_ms(shanghai) == 1_700_000_000_999
    assert build("r", "T", 1, utc, b"").occurred_at_ms == 1_700_000_000_999
    assert to_ms(datetime(1969, 12, 31, 23, 59, 59, 999_000, tzinfo=UTC)) == -1


def test_naive_datetimes_are_refused() -> None:
    with pytest.raises(ValueError, match="naive datetime"):
        build("r", "T", 1, datetime(2024, 1, 1), b"")


@pytest.mark.parametrize("bad", [1.5, "2024-01-01", True])
def test_other_times_are_refused(bad: object) -> None:
    with pytest.raises(TypeError, match="occurred_at"):
        to_ms(bad)  # type: ignore[arg-type]


def test_a_protobuf_message_body_is_serialized() -> None:
    message = EventEnvelope(room_id="inner", room_version=3)
    event = build("r", "T", 1, 0, message)
    assert event.body == message.SerializeToString()
    assert EventEnvelope.FromString(event.body).room_id == "inner"


@pytest.mark.parametrize("body", [bytearray(b"\x00\xff"), memoryview(b"\x00\xff")])
def test_bytes_like_bodies_are_copied_to_bytes(body: bytes) -> None:
    event = Event("r", "T", 1, body)
    assert type(event.body) is bytes
    assert event.body == b"\x00\xff"


def test_events_are_frozen_and_replace_keeps_the_id() -> None:
    event = Event("r", "T", 1, b"x")
    with pytest.raises(dataclasses.FrozenInstanceError):
        event.room_id = "other"  # type: ignore[misc]
    moved = dataclasses.replace(event, room_id="other")
    assert moved.event_id == event.event_id
    assert moved.room_id == "other"


def test_an_explicit_event_id_is_kept_and_each_new_event_gets_its_own() -> None:
    assert Event("r", "T", 1, event_id="mine").event_id == "mine"
    assert Event("r", "T", 1).event_id != Event("r", "T", 1).event_id


def test_the_envelope_carries_every_field() -> None:
    event = Event(
        "房间-1", "RoomMicChanged", -3, b"\x01", app_code="live", event_id="e-1", occurred_at_ms=9
    )
    decoded = EventEnvelope.FromString(event.encoded_envelope())
    assert (
        decoded.app_code,
        decoded.event_id,
        decoded.room_id,
        decoded.event_type,
        decoded.room_version,
        decoded.occurred_at_ms,
        decoded.body,
    ) == ("live", "e-1", "房间-1", "RoomMicChanged", -3, 9, b"\x01")


def test_the_envelope_carries_the_trace_context() -> None:
    traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
    event = Event("r", "T", 1, event_id="e-1", traceparent=traceparent, tracestate="k=v")
    decoded = EventEnvelope.FromString(event.encoded_envelope())
    assert (decoded.traceparent, decoded.tracestate) == (traceparent, "k=v")
    # Without one, the envelope is what it was before the fields existed.
    plain = dataclasses.replace(event, traceparent=None, tracestate=None)
    assert EventEnvelope.FromString(plain.encoded_envelope()).traceparent == ""
    # Field 8 (tag 0x42, length, 55 characters) and field 9 (tag 0x4a, length, 3) are all it adds.
    assert len(event.encoded_envelope()) - len(plain.encoded_envelope()) == 2 + 55 + 2 + 3
