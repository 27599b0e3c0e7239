from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Optional as _Optional

DESCRIPTOR: _descriptor.FileDescriptor

class EventEnvelope(_message.Message):
    __slots__ = ("app_code", "event_id", "room_id", "event_type", "room_version", "occurred_at_ms", "body", "traceparent", "tracestate")
    APP_CODE_FIELD_NUMBER: _ClassVar[int]
    EVENT_ID_FIELD_NUMBER: _ClassVar[int]
    ROOM_ID_FIELD_NUMBER: _ClassVar[int]
    EVENT_TYPE_FIELD_NUMBER: _ClassVar[int]
    ROOM_VERSION_FIELD_NUMBER: _ClassVar[int]
    OCCURRED_AT_MS_FIELD_NUMBER: _ClassVar[int]
    BODY_FIELD_NUMBER: _ClassVar[int]
    TRACEPARENT_FIELD_NUMBER: _ClassVar[int]
    TRACESTATE_FIELD_NUMBER: _ClassVar[int]
    app_code: str
    event_id: str
    room_id: str
    event_type: str
    room_version: int
    occurred_at_ms: int
    body: bytes
    traceparent: str
    tracestate: str
    def __init__(self, app_code: _Optional[str] = ..., event_id: _Optional[str] = ..., room_id: _Optional[str] = ..., event_type: _Optional[str] = ..., room_version: _Optional[int] = ..., occurred_at_ms: _Optional[int] = ..., body: _Optional[bytes] = ..., traceparent: _Optional[str] = ..., tracestate: _Optional[str] = ...) -> None: ...
