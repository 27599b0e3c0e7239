#!/usr/bin/env python3
"""A Standard Webhooks receiver for the README's walk: prints each event outboxd posts, after
checking its signature; answers 204 (delivered) or 401 (bad signature: the event is failed).

    python3 demo/receiver.py [PORT] [SECRET]      # defaults: 8787 and demo/postgres.toml's secret
"""

import base64
import hashlib
import hmac
import json
import sys
from http.server import BaseHTTPRequestHandler, HTTPServer

PORT = int(sys.argv[1]) if len(sys.argv) > 1 else 8787
SECRET = sys.argv[2] if len(sys.argv) > 2 else "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
KEY = base64.b64decode(SECRET.removeprefix("whsec_"))


def signed(headers, body: bytes) -> bool:
    """True when one of the `v1,` signatures is HMAC-SHA256(id.timestamp.body) under KEY."""
    message = f"{headers['webhook-id']}.{headers['webhook-timestamp']}.".encode() + body
    expected = base64.b64encode(hmac.new(KEY, message, hashlib.sha256).digest()).decode()
    given = headers.get("webhook-signature", "").split()
    return any(hmac.compare_digest(sig, f"v1,{expected}") for sig in given)


class Hook(BaseHTTPRequestHandler):
    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("content-length", 0)))
        if not signed(self.headers, body):
            self.send_response(401)
            self.end_headers()
            return
        event = json.loads(body)
        event["body"] = base64.b64decode(event["body"]).decode("utf-8", "replace")
        print(json.dumps(event, ensure_ascii=False), flush=True)
        self.send_response(204)
        self.end_headers()

    def log_message(self, *args):
        pass


if __name__ == "__main__":
    print(f"listening on http://127.0.0.1:{PORT}/hook", flush=True)
    HTTPServer(("127.0.0.1", PORT), Hook).serve_forever()
