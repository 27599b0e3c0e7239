"""The ``outbox.v1.EventEnvelope`` encoding (``proto/outbox/v1/envelope.proto``), by the official
``protobuf`` runtime.

``envelope_pb2.py`` (and its ``.pyi``) are generated from the shared ``.proto`` and committed;
regenerate them with ``producers/python/regen_proto.sh`` after the ``.proto`` changes.
"""

from __future__ import annotations

from .envelope_pb2 import EventEnvelope

__all__ = ["EventEnvelope", "encode_envelope"]


def encode_envelope(
    *,
    app_code: str,
    event_id: str,
    room_id: str,
    event_type: str,
    room_version: int,
    occurred_at_ms: int,
    body: bytes,
    traceparent: str = "",
    tracestate: str = "",
) -> bytes:
    """The serialized ``EventEnvelope`` of these fields: the bytes stored in the row's
    ``envelope`` column (proto3, so fields at their default value take no bytes: without a
    ``traceparent`` and ``tracestate`` the envelope is byte for byte what it was before they
    existed)."""
    message = EventEnvelope(
        app_code=app_code,
        event_id=event_id,
        room_id=room_id,
        event_type=event_type,
        room_version=room_version,
        occurred_at_ms=occurred_at_ms,
        body=body,
        traceparent=traceparent,
        tracestate=tracestate,
    )
    return message.SerializeToString(deterministic=True)
