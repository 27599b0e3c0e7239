"""An HTTP server on 127.0.0.1 that records the webhook plugin's requests."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import threading
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any, Self


@dataclass(frozen=True)
class Received:
    """One request: its path, headers (lowercase names) and body."""

    path: str
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        """The body parsed as JSON."""
        return json.loads(self.body)


def standard_webhooks_signature(secret: str, message_id: str, timestamp: str, body: bytes) -> str:
    """``v1,<base64 HMAC-SHA256(key, "{id}.{timestamp}.{body}")>`` with the key decoded from
    ``whsec_<base64>`` (the Standard Webhooks scheme the plugin signs with)."""
    key = base64.b64decode(secret.removeprefix("whsec_"))
    signed = f"{message_id}.{timestamp}.".encode() + body
    return "v1," + base64.b64encode(hmac.new(key, signed, hashlib.sha256).digest()).decode()


class WebhookReceiver:
    """Answers every POST with 200 and keeps it; use as a context manager."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._received: list[Received] = []
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                body = self.rfile.read(length)
                # http.server decodes header bytes as Latin-1; the plugin sends UTF-8 (an event id
                # may be any text).
                headers = {
                    name.lower(): value.encode("latin-1").decode("utf-8", "replace")
                    for name, value in self.headers.items()
                }
                with receiver._lock:
                    receiver._received.append(Received(self.path, headers, body))
                self.send_response(200)
                self.send_header("content-length", "2")
                self.end_headers()
                self.wfile.write(b"ok")

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def port(self) -> int:
        """The port it listens on."""
        return int(self._server.server_address[1])

    @property
    def received(self) -> list[Received]:
        """The requests so far, in arrival order."""
        with self._lock:
            return list(self._received)

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)
