#!/usr/bin/env python3
"""Writes envelopes.json: golden `outbox.v1.EventEnvelope` encodings (proto/outbox/v1/envelope.proto).

The encoder below is a deliberately plain, independent reading of the protobuf wire format
(proto3: fields at their default value are not written; strings and bytes are length-delimited;
int64 is a varint of the two's-complement value, so a negative number takes ten bytes). The Rust
host (prost, `tests/golden_envelopes.rs`) and each producer library check their own encoder
against the file, so all of them write byte-identical envelopes.

Run `python3 producers/golden/generate.py` after changing the cases; commit the JSON it writes.
"""

import json
import pathlib

TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

FIELDS = [  # (number, name, kind) in .proto order
    (1, "app_code", "string"),
    (2, "event_id", "string"),
    (3, "room_id", "string"),
    (4, "event_type", "string"),
    (5, "room_version", "int64"),
    (6, "occurred_at_ms", "int64"),
    (7, "body", "bytes"),
    (8, "traceparent", "string"),
    (9, "tracestate", "string"),
]


def varint(value: int) -> bytes:
    value &= (1 << 64) - 1
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def encode(event: dict) -> bytes:
    out = bytearray()
    for number, name, kind in FIELDS:
        value = event["body_hex" if name == "body" else name]
        if kind == "int64":
            value = int(value)
            if value != 0:
                out += varint(number << 3 | 0) + varint(value)
        else:
            data = value.encode("utf-8") if kind == "string" else bytes.fromhex(value)
            if data:
                out += varint(number << 3 | 2) + varint(len(data)) + data
    return bytes(out)


def event(app_code="", event_id="", room_id="", event_type="", room_version=0, occurred_at_ms=0, body=b"",
          traceparent="", tracestate=""):
    return {
        "app_code": app_code,
        "event_id": event_id,
        "room_id": room_id,
        "event_type": event_type,
        # int64 values as decimal strings: JSON numbers lose precision past 2^53 in JavaScript.
        "room_version": str(room_version),
        "occurred_at_ms": str(occurred_at_ms),
        "body_hex": body.hex(),
        "traceparent": traceparent,
        "tracestate": tracestate,
    }


CASES = [
    ("gift", event("default", "evt_018bcfe568000a1b2c3d4e5f60718", "room-42", "RoomGiftSent", 7,
                   1_700_000_000_000, b'{"gift":"rose","from":"u1","to":"u2"}')),
    ("all_defaults", event()),
    ("unicode", event("直播", "evt_é_🎁", "房间-1", "RoomMicChanged", 0, 0, "麦位 🎤".encode())),
    ("empty_body", event("live", "e-1", "r-1", "RoomHeatChanged", 1, 1)),
    ("negative_and_extreme_ints", event("a", "b", "c", "d", -1, 2**63 - 1, b"\x00")),
    ("int64_min", event("a", "b", "c", "d", -(2**63), -1, b"")),
    ("binary_body_300_bytes", event("default", "evt_bin", "room-7", "RoomRankChanged", 300, 1_733_011_200_123,
                                    bytes(range(256)) + b"\x00\xff" * 22)),
    ("long_ids", event("x" * 64, "e" * 128, "r" * 128, "t" * 128, 2**31, 2**53 + 1, b"z" * 128)),
    ("only_body", event(body=b"\x0a\x00")),
    ("traced", event("default", "evt_018bcfe568000a1b2c3d4e5f60718", "room-42", "RoomGiftSent", 7,
                     1_700_000_000_000, b"{}", TRACEPARENT, "rojo=00f067aa0ba902b7,congo=t61rcWkgMzE")),
    ("traced_without_state", event("default", "e-2", "room-42", "RoomGiftSent", 8, 1_700_000_000_001, b"",
                                   "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00")),
]

# What a producer library accepts as `traceparent` (the W3C Trace Context header, level 1): two
# lowercase hex digits of version (not ff), a 32-digit trace id and a 16-digit parent id that are
# not all zeros, two digits of flags, joined by '-'; version 00 is exactly that (55 characters),
# a later version may carry more after a further '-', up to TRACEPARENT_MAX characters in all
# (Unicode scalar values, as the host counts them). Every library checks the same cases.
TRACEPARENT_MAX = 256
LATER = "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-"  # 56 characters
TRACEPARENT_CHECKS = [
    (TRACEPARENT, True),
    ("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00", True),
    ("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-what-comes-later", True),
    ("cc-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", True),
    ("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra", False),
    ("ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", False),
    ("00-00000000000000000000000000000000-00f067aa0ba902b7-01", False),
    ("00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01", False),
    ("00-4BF92F3577B34DA6A3CE929D0E0E4736-00F067AA0BA902B7-01", False),
    ("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7", False),
    ("00-4bf92f3577b34da6a3ce929d0e0e473-600f067aa0ba902b7-01", False),
    ("00_4bf92f3577b34da6a3ce929d0e0e4736_00f067aa0ba902b7_01", False),
    ("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01x", False),
    ("0-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", False),
    ("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-zz", False),
    (" 00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", False),
    (LATER + "x" * (TRACEPARENT_MAX - len(LATER)), True),
    (LATER + "x" * (TRACEPARENT_MAX + 1 - len(LATER)), False),
    # 256 characters, but 259 UTF-8 bytes and 257 UTF-16 code units: characters are what count.
    (LATER + "🎁" + "x" * (TRACEPARENT_MAX - 1 - len(LATER)), True),
]


def main() -> None:
    cases = []
    for name, ev in CASES:
        cases.append({"name": name, "event": ev, "envelope_hex": encode(ev).hex()})
    id_prefixes = [
        {"ms": str(ms), "prefix": f"evt_{ms:013x}"}
        for ms in (0, 1, 1_700_000_000_000, 1_733_011_200_123, 2**52 - 1)
    ]
    doc = {
        "about": "Golden outbox.v1.EventEnvelope encodings (proto/outbox/v1/envelope.proto). "
        "int64 fields are decimal strings, bytes are hex. Written by generate.py; the host and "
        "every producer library must encode each event to exactly envelope_hex.",
        "cases": cases,
        "event_id_about": "A new event id is `evt_` + the milliseconds as 13 lowercase hex digits + 16 "
        "lowercase hex digits: random for the first id of a millisecond, one more than the last for the "
        "next ids of the same millisecond made by the same generator, so ids sort in the order they were "
        "made. event_id_prefixes gives the first 17 characters for some milliseconds.",
        "event_id_prefixes": id_prefixes,
        "traceparent_about": "An event's traceparent, when not empty, must be a W3C Trace Context "
        "traceparent: version (2 lowercase hex digits, not ff), trace id (32, not all zeros), parent "
        "id (16, not all zeros), flags (2), joined by '-'; version 00 is exactly 55 characters, a "
        f"later version may go on after a further '-', to at most {TRACEPARENT_MAX} characters "
        "(Unicode scalar values) in all. tracestate: at most 512 characters, printable ASCII, and "
        "only with a traceparent. Every library accepts exactly the valid ones below.",
        "traceparent_checks": [{"traceparent": value, "valid": valid} for value, valid in TRACEPARENT_CHECKS],
    }
    path = pathlib.Path(__file__).with_name("envelopes.json")
    path.write_text(json.dumps(doc, ensure_ascii=False, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
