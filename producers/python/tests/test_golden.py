"""The encoder against producers/golden/envelopes.json (envelopes and traceparent checks), and the
committed envelope_pb2 against the shared .proto."""

from __future__ import annotations

import re
from typing import Any

import pytest
from support.paths import PROTO, golden

from outboxd_producer import Event, EventEnvelope, InvalidEventError, encode_envelope, new_event_id
from outboxd_producer.validate import MAX_TRACEPARENT_CHARS

CASES = golden()["cases"]
PREFIXES = golden()["event_id_prefixes"]
TRACEPARENT_CHECKS = golden()["traceparent_checks"]


def fields(event: dict[str, Any]) -> dict[str, Any]:
    """A golden case's event as keyword arguments of encode_envelope."""
    return {
        "app_code": event["app_code"],
        "event_id": event["event_id"],
        "room_id": event["room_id"],
        "event_type": event["event_type"],
        "room_version": int(event["room_version"]),
        "occurred_at_ms": int(event["occurred_at_ms"]),
        "body": bytes.fromhex(event["body_hex"]),
        "traceparent": event["traceparent"],
        "tracestate": event["tracestate"],
    }


def test_the_golden_file_has_cases() -> None:
    assert len(CASES) >= 11
    assert len(PREFIXES) >= 5
    names = {case["name"] for case in CASES}
    assert {"traced", "traced_without_state"} <= names
    assert len(TRACEPARENT_CHECKS) >= 19
    assert {check["valid"] for check in TRACEPARENT_CHECKS} == {True, False}
    longest = max(len(check["traceparent"]) for check in TRACEPARENT_CHECKS if check["valid"])
    assert longest == MAX_TRACEPARENT_CHARS, "the cap's edge is a golden check"


@pytest.mark.parametrize("case", CASES, ids=[case["name"] for case in CASES])
def test_encoder_writes_the_golden_bytes(case: dict[str, Any]) -> None:
    assert encode_envelope(**fields(case["event"])).hex() == case["envelope_hex"]


@pytest.mark.parametrize("case", CASES, ids=[case["name"] for case in CASES])
def test_golden_bytes_decode_to_the_case(case: dict[str, Any]) -> None:
    decoded = EventEnvelope.FromString(bytes.fromhex(case["envelope_hex"]))
    expected = fields(case["event"])
    assert {name: getattr(decoded, name) for name in expected} == expected


# The cases an Event can hold (an Event needs an id, a type and a room).
STORABLE = [
    case
    for case in CASES
    if all(case["event"][name] for name in ("event_id", "event_type", "room_id"))
]


@pytest.mark.parametrize("case", STORABLE, ids=[case["name"] for case in STORABLE])
def test_an_event_stores_the_golden_bytes(case: dict[str, Any]) -> None:
    """Event.encoded_envelope (what enqueue writes) is the golden encoding."""
    event = Event(**fields(case["event"]))
    assert event.event_id == case["event"]["event_id"]
    assert event.traceparent == (case["event"]["traceparent"] or None)
    assert event.tracestate == (case["event"]["tracestate"] or None)
    assert event.encoded_envelope().hex() == case["envelope_hex"]


def test_most_cases_are_storable_events() -> None:
    assert len(STORABLE) >= 8
    assert sum(1 for case in STORABLE if case["event"]["traceparent"]) >= 2


@pytest.mark.parametrize(
    "check", TRACEPARENT_CHECKS, ids=[check["traceparent"] for check in TRACEPARENT_CHECKS]
)
def test_traceparent_checks(check: dict[str, Any]) -> None:
    """Every value the golden file lists is accepted or refused, as by every other library."""
    value = check["traceparent"]

    def make() -> Event:
        return Event("room-1", "RoomGiftSent", 1, event_id="e-1", traceparent=value)

    if check["valid"]:
        event = make()
        assert event.traceparent == value
        assert EventEnvelope.FromString(event.encoded_envelope()).traceparent == value
    else:
        with pytest.raises(InvalidEventError, match="is not a W3C traceparent") as error:
            make()
        assert error.value.field == "traceparent"
        assert error.value.event_id == "e-1"
        assert "event 'e-1'" in str(error.value)


@pytest.mark.parametrize("prefix", PREFIXES, ids=[p["ms"] for p in PREFIXES])
def test_new_ids_start_with_the_golden_prefix(prefix: dict[str, str]) -> None:
    event_id = new_event_id(int(prefix["ms"]))
    assert event_id.startswith(prefix["prefix"])
    assert len(event_id) == 4 + 13 + 16


def test_envelope_pb2_matches_the_shared_proto() -> None:
    """Field names, numbers and types of the committed envelope_pb2 are those of
    proto/outbox/v1/envelope.proto (regenerate with regen_proto.sh when this fails)."""
    text = PROTO.read_text(encoding="utf-8")
    assert re.search(r"^package outbox\.v1;", text, re.MULTILINE)
    body = re.search(r"message EventEnvelope \{(.*?)\n\}", text, re.DOTALL)
    assert body is not None
    declared = {
        (name, int(number), kind)
        for kind, name, number in re.findall(
            r"^\s*(\w+)\s+(\w+)\s*=\s*(\d+);", body.group(1), re.MULTILINE
        )
    }
    descriptor = EventEnvelope.DESCRIPTOR
    assert descriptor.full_name == "outbox.v1.EventEnvelope"
    assert descriptor.file.name == "outbox/v1/envelope.proto"
    type_names = {9: "string", 3: "int64", 12: "bytes"}  # FieldDescriptor.TYPE_*
    generated = {(f.name, f.number, type_names.get(f.type, str(f.type))) for f in descriptor.fields}
    assert generated == declared
    assert len(declared) == 9
