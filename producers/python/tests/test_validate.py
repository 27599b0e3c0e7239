"""The checks before writing: limits in characters, empty fields, types; errors name the field and
the event."""

from __future__ import annotations

from typing import Any

import pytest

from outboxd_producer import Event, InvalidEventError, build
from outboxd_producer.validate import MAX_TRACEPARENT_CHARS


def event(**overrides: Any) -> Event:
    values: dict[str, Any] = {
        "room_id": "room-1",
        "event_type": "RoomGiftSent",
        "room_version": 1,
        "body": b"",
        "app_code": "default",
        "event_id": "e-1",
        "occurred_at_ms": 1,
    }
    values.update(overrides)
    return Event(**values)


@pytest.mark.parametrize(
    ("field", "limit"), [("app_code", 64), ("event_id", 128), ("event_type", 128), ("room_id", 128)]
)
def test_limits_are_characters_not_bytes(field: str, limit: int) -> None:
    assert getattr(event(**{field: "x" * limit}), field) == "x" * limit
    # 4-byte characters: the limit counts Unicode scalar values, as the host does.
    assert getattr(event(**{field: "🎁" * limit}), field) == "🎁" * limit
    with pytest.raises(InvalidEventError) as error:
        event(**{field: "🎁" * (limit + 1)})
    assert error.value.field == field
    assert f"{field} is {limit + 1} characters, at most {limit} fit" in str(error.value)


@pytest.mark.parametrize("field", ["event_type", "room_id"])
def test_type_and_room_must_not_be_empty(field: str) -> None:
    with pytest.raises(InvalidEventError, match=f"{field} must not be empty") as error:
        event(**{field: ""})
    assert error.value.field == field
    assert error.value.event_id == "e-1"
    assert "'e-1'" in str(error.value)


def test_an_empty_app_code_is_allowed_as_in_the_spec() -> None:
    assert event(app_code="").app_code == ""


def test_the_error_names_the_event() -> None:
    with pytest.raises(InvalidEventError) as error:
        event(event_id="gift-9", room_id="r" * 129)
    message = str(error.value)
    assert "room_id is 129 characters" in message
    assert "event 'gift-9'" in message
    assert "type 'RoomGiftSent'" in message


def test_a_generated_id_is_named_too() -> None:
    with pytest.raises(InvalidEventError) as error:
        build("", "RoomGiftSent", 1, 1_700_000_000_000, b"")
    assert error.value.event_id.startswith("evt_0018bcfe56800")
    assert error.value.event_id in str(error.value)


@pytest.mark.parametrize("field", ["app_code", "event_id", "event_type", "room_id"])
def test_text_fields_must_be_str(field: str) -> None:
    with pytest.raises(InvalidEventError, match=f"{field} must be a str, not bytes"):
        event(**{field: b"x"})


def test_text_must_be_encodable() -> None:
    with pytest.raises(InvalidEventError, match="room_id is not valid Unicode text") as error:
        event(room_id="a\ud800b")
    assert error.value.field == "room_id"


@pytest.mark.parametrize("field", ["room_version", "occurred_at_ms"])
@pytest.mark.parametrize("bad", [1.0, "1", True, None])
def test_numbers_must_be_ints(field: str, bad: object) -> None:
    with pytest.raises(InvalidEventError, match=f"{field} must be an int") as error:
        event(**{field: bad})
    assert error.value.field == field


@pytest.mark.parametrize("field", ["room_version", "occurred_at_ms"])
def test_numbers_must_fit_int64(field: str) -> None:
    assert getattr(event(**{field: 2**63 - 1}), field) == 2**63 - 1
    assert getattr(event(**{field: -(2**63)}), field) == -(2**63)
    for bad in (2**63, -(2**63) - 1):
        with pytest.raises(
            InvalidEventError, match=f"{field} is {bad}, outside the signed 64-bit range"
        ):
            event(**{field: bad})


def test_a_generated_id_needs_a_valid_time() -> None:
    with pytest.raises(InvalidEventError, match="occurred_at_ms must be an int"):
        event(event_id="", occurred_at_ms="now")


@pytest.mark.parametrize("body", ["text", None, 5])
def test_body_must_be_bytes(body: object) -> None:
    with pytest.raises(InvalidEventError, match="body must be bytes") as error:
        event(body=body)
    assert error.value.field == "body"


def test_a_message_body_in_an_event_gets_a_hint() -> None:
    class Message:
        def SerializeToString(self) -> bytes:
            return b""

    with pytest.raises(
        InvalidEventError,
        match=r"body must be bytes, not Message \(serialize it, or use build\(\)\)",
    ):
        event(body=Message())


TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


def test_a_trace_context_is_optional_and_kept() -> None:
    plain = event()
    assert (plain.traceparent, plain.tracestate) == (None, None)
    traced = event(traceparent=TRACEPARENT, tracestate="rojo=00f067aa0ba902b7")
    assert (traced.traceparent, traced.tracestate) == (TRACEPARENT, "rojo=00f067aa0ba902b7")
    assert event(traceparent=TRACEPARENT).tracestate is None


def test_empty_trace_context_strings_are_not_given() -> None:
    empty = event(traceparent="", tracestate="")
    assert (empty.traceparent, empty.tracestate) == (None, None)
    assert empty.encoded_envelope() == event().encoded_envelope()
    assert event(traceparent=TRACEPARENT, tracestate="").tracestate is None


def test_the_trace_context_is_keyword_only() -> None:
    with pytest.raises(TypeError):
        Event("r", "T", 1, b"", "default", "e-1", 1, TRACEPARENT)  # type: ignore[call-arg]


def test_a_tracestate_needs_a_traceparent() -> None:
    with pytest.raises(InvalidEventError, match="tracestate is given without a traceparent") as e:
        event(tracestate="rojo=00f067aa0ba902b7")
    assert e.value.field == "tracestate"
    assert e.value.event_id == "e-1"
    assert "event 'e-1'" in str(e.value)
    with pytest.raises(InvalidEventError, match="without a traceparent"):
        event(traceparent="", tracestate="rojo=00f067aa0ba902b7")


def test_a_tracestate_is_at_most_512_characters() -> None:
    longest = "k=" + "v" * 510
    assert event(traceparent=TRACEPARENT, tracestate=longest).tracestate == longest
    with pytest.raises(InvalidEventError, match="tracestate is 513 characters, at most 512") as e:
        event(traceparent=TRACEPARENT, tracestate=longest + "v")
    assert e.value.field == "tracestate"


@pytest.mark.parametrize(("bad", "at"), [("k=v\n", 3), ("k=\x7f", 2), ("k=é", 2), ("\tk=v", 0)])
def test_a_tracestate_is_printable_ascii(bad: str, at: int) -> None:
    assert event(traceparent=TRACEPARENT, tracestate=" !~").tracestate == " !~"
    with pytest.raises(InvalidEventError, match=f"tracestate has .* at {at}, only printable ASCII"):
        event(traceparent=TRACEPARENT, tracestate=bad)


@pytest.mark.parametrize("field", ["traceparent", "tracestate"])
@pytest.mark.parametrize("bad", [b"x", 1, ["x"]])
def test_trace_context_fields_must_be_str_or_none(field: str, bad: object) -> None:
    values: dict[str, object] = {"traceparent": TRACEPARENT, field: bad}
    with pytest.raises(InvalidEventError, match=f"{field} must be a str or None") as error:
        event(**values)
    assert error.value.field == field


@pytest.mark.parametrize(
    ("bad", "reason"),
    [
        ("ff" + TRACEPARENT[2:], "version ff is invalid"),
        (TRACEPARENT[:3] + "0" * 32 + TRACEPARENT[35:], "the trace id is all zeros"),
        (TRACEPARENT[:36] + "0" * 16 + TRACEPARENT[52:], "the parent id is all zeros"),
        (TRACEPARENT + "-x", "version 00 is exactly 55 characters, this is 57"),
        ("01" + TRACEPARENT[2:] + "x", "a later version goes on after the flags only behind"),
        (TRACEPARENT.upper(), "expected version-traceid-parentid-flags, 2-32-16-2 lowercase"),
        ("", None),
    ],
)
def test_a_traceparent_error_says_why(bad: str, reason: str | None) -> None:
    if reason is None:
        assert event(traceparent=bad).traceparent is None
        return
    with pytest.raises(InvalidEventError) as error:
        event(traceparent=bad)
    assert str(error.value).startswith(f"traceparent {bad!r} is not a W3C traceparent: {reason}")
    assert str(error.value).endswith("(event 'e-1', type 'RoomGiftSent', room 'room-1')")


def test_a_later_traceparent_version_may_go_on() -> None:
    later = "01" + TRACEPARENT[2:] + "-more-fields"
    assert event(traceparent=later).traceparent == later
    # Up to MAX_TRACEPARENT_CHARS characters (not UTF-8 bytes): 256 of them in 456 bytes.
    longest = "01" + TRACEPARENT[2:] + "-" + "é" * (MAX_TRACEPARENT_CHARS - 56)
    assert len(longest) == MAX_TRACEPARENT_CHARS
    assert event(traceparent=longest).traceparent == longest
    reason = "is not a W3C traceparent: a later version is at most 256 characters, this is 257"
    for over in (longest + "é", "01" + TRACEPARENT[2:] + "-" + "x" * 201):
        with pytest.raises(InvalidEventError, match=reason) as error:
            event(traceparent=over)
        assert error.value.field == "traceparent"
    with pytest.raises(InvalidEventError, match="traceparent is not valid Unicode text"):
        event(traceparent=later + "\ud800")


def test_build_takes_a_trace_context() -> None:
    built = build("r", "T", 1, 5, b"", traceparent=TRACEPARENT, tracestate="k=v")
    assert (built.traceparent, built.tracestate) == (TRACEPARENT, "k=v")
    with pytest.raises(InvalidEventError, match="tracestate is given without a traceparent"):
        build("r", "T", 1, 5, b"", tracestate="k=v")
