"""The `jsonl-log` publisher plugin (Python, componentize-py): one JSON line per event in
outboxd's log, through the `logging` import, tagged there with the sink's name.

Settings:
- `level`: `debug` | `info` (default) | `warn`: the log level of the lines;
- `body`: `base64` (default: the event's JSON form, body base64, as the Rust log plugin writes
  it) | `text` (the body decoded as UTF-8 into a `body_text` field; a body that is not UTF-8 is
  a permanent error for that event, the others are delivered).
"""

import base64
import json

import wit_world
from componentize_py_types import Err, Ok
from wit_world.imports import logging
from wit_world.imports.types import PublishError_Permanent, PublishError_Retryable

LEVELS = {
    "debug": logging.Level.DEBUG,
    "info": logging.Level.INFO,
    "warn": logging.Level.WARN,
}
BODY_FORMS = ("base64", "text")
SETTINGS = ("level", "body")


# The settings `init` parsed. Module state: componentize-py makes a new `WitWorld` object for
# every call, while the module lives as long as the instance.
SETTINGS_OF_INSTANCE = {}


class WitWorld(wit_world.WitWorld):
    """The plugin's exports: `init` keeps the settings, `publish` uses them."""

    def init(self, config):
        values = dict(config)
        for key in values:
            if key not in SETTINGS:
                raise Err(
                    f"jsonl-log plugin: unknown setting `{key}`: the settings are {', '.join(SETTINGS)}"
                )
        level = values.get("level", "info")
        if level not in LEVELS:
            raise Err(f"jsonl-log plugin: unknown level `{level}`: use `debug`, `info` or `warn`")
        body = values.get("body", "base64")
        if body not in BODY_FORMS:
            raise Err(f"jsonl-log plugin: unknown body `{body}`: use `base64` or `text`")
        SETTINGS_OF_INSTANCE["level"] = LEVELS[level]
        SETTINGS_OF_INSTANCE["body"] = body

    def publish(self, batch):
        if not SETTINGS_OF_INSTANCE:
            return [Err(PublishError_Retryable("jsonl-log plugin: publish before init")) for _ in batch]
        results = []
        for event in batch:
            try:
                line = json_line(event, SETTINGS_OF_INSTANCE["body"])
            except UnicodeDecodeError as error:
                results.append(
                    Err(PublishError_Permanent(f"jsonl-log: event {event.event_id}: body is not UTF-8 text: {error.reason}"))
                )
                continue
            logging.log(SETTINGS_OF_INSTANCE["level"], line)
            results.append(Ok(None))
        return results


def json_line(event, body_form):
    """The event's JSON form (every field), the body base64 or, with `text`, as `body_text`."""
    fields = {
        "app_code": event.app_code,
        "event_id": event.event_id,
        "event_type": event.event_type,
        "room_id": event.room_id,
        "room_version": event.room_version,
        "occurred_at_ms": event.occurred_at_ms,
        "attempt": event.attempt,
    }
    if body_form == "text":
        fields["body_text"] = bytes(event.body).decode("utf-8")
    else:
        fields["body"] = base64.b64encode(bytes(event.body)).decode("ascii")
    return json.dumps(fields, separators=(",", ":"), ensure_ascii=False)
