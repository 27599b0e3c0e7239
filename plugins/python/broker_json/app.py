"""The `broker-json` publisher plugin (Python, componentize-py, world `broker-publisher`): each
event as one JSON message on a host `[[broker]]` connection, through the `broker` import; the
host answers each message once the broker confirmed it, and those answers are the results.

Settings:
- `connection` (required): the `[[broker]]` name (the sink's `limits.allow_brokers` lists it);
- `prefix`: the topic is `<prefix>.<app_code>.<event_type>` (default `outbox`); the key is the
  room id, the message id the event id, the headers `event-id` and `event-type`, and the
  event's W3C trace context as `traceparent` / `tracestate` when it carries one.
"""

import base64
import json

import wit_world
from componentize_py_types import Err
from wit_world.imports import broker, trace

SETTINGS = ("connection", "prefix")

# The settings `init` parsed (module state lives as long as the instance).
SETTINGS_OF_INSTANCE = {}


class WitWorld(wit_world.WitWorld):
    """The plugin's exports: `init` keeps the settings, `publish` hands the batch to the broker."""

    def init(self, config):
        values = dict(config)
        for key in values:
            if key not in SETTINGS:
                raise Err(
                    f"broker-json plugin: unknown setting `{key}`: the settings are {', '.join(SETTINGS)}"
                )
        if not values.get("connection"):
            raise Err("broker-json plugin: the `connection` setting is required")
        SETTINGS_OF_INSTANCE["connection"] = values["connection"]
        SETTINGS_OF_INSTANCE["prefix"] = values.get("prefix", "outbox")

    def publish(self, batch):
        prefix = SETTINGS_OF_INSTANCE["prefix"]
        messages = [
            broker.Message(
                topic=f"{prefix}.{event.app_code}.{event.event_type}",
                key=event.room_id.encode(),
                headers=[("event-id", event.event_id), ("event-type", event.event_type)]
                + trace_headers(event),
                payload=json.dumps(
                    {
                        "event_id": event.event_id,
                        "event_type": event.event_type,
                        "room_id": event.room_id,
                        "room_version": event.room_version,
                        "body": base64.b64encode(bytes(event.body)).decode(),
                    }
                ).encode(),
                message_id=event.event_id,
            )
            for event in batch
        ]
        return broker.publish(SETTINGS_OF_INSTANCE["connection"], messages)


def trace_headers(event):
    """The event's trace context as `traceparent` (and `tracestate`) headers; none without one."""
    context = trace.context_of(event.event_id)
    if context is None:
        return []
    headers = [("traceparent", context.traceparent)]
    if context.tracestate:
        headers.append(("tracestate", context.tracestate))
    return headers
