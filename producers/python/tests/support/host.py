"""The real outboxd host: its binary, a test's config, running ``migrate`` and ``run --drain``."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from .databases import unavailable
from .paths import REPO

WEBHOOK_WASM = REPO / "plugins" / "out" / "webhook.wasm"
#: The Standard Webhooks secret the tests sign with (SPEC.md's test config).
WEBHOOK_SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
RUN_TIMEOUT_S = 180


def outboxd_bin() -> Path:
    """``$OUTBOXD_BIN``, or ``<repo>/target/debug/outboxd``."""
    return Path(os.environ.get("OUTBOXD_BIN") or REPO / "target" / "debug" / "outboxd")


def require_host() -> Path:
    """The host binary; skips (fails in CI) when it or the webhook plugin is not built."""
    binary = outboxd_bin()
    if not os.access(binary, os.X_OK):
        unavailable(f"no outboxd binary at {binary}: run `make build` or set OUTBOXD_BIN")
    if not WEBHOOK_WASM.is_file():
        unavailable(f"no webhook plugin at {WEBHOOK_WASM}: run `make build`")
    return binary


def toml_str(value: str) -> str:
    """``value`` as a TOML basic string (JSON's escapes are TOML's)."""
    return json.dumps(value, ensure_ascii=False)


def write_config(path: Path, database_url: str, app_codes: list[str], port: int) -> Path:
    """The host config of SPEC.md's end-to-end test: every event type to the webhook plugin,
    which posts JSON to ``http://127.0.0.1:<port>/hook``."""
    origin = f"http://127.0.0.1:{port}"
    path.write_text(
        f"""[database]
url = {toml_str(database_url)}

[worker]
app_codes = [{", ".join(toml_str(app) for app in app_codes)}]
poll_interval = "100ms"

[[route]]
event_type = "*"
sink = "hook"

[[sink]]
name = "hook"
plugin = {toml_str(str(WEBHOOK_WASM))}
config = {{ url = {toml_str(origin + "/hook")}, secret = {toml_str(WEBHOOK_SECRET)}, \
content_type = "json" }}
limits = {{ allow_hosts = [{toml_str(origin)}], allow_private_addresses = true }}
""",
        encoding="utf-8",
    )
    return path


def host_env() -> dict[str, str]:
    """The environment for the host: no ``OUTBOXD_*`` overrides from outside (no
    ``OUTBOXD_DATABASE_URL``), and no admin listener (tests run side by side)."""
    env = {name: value for name, value in os.environ.items() if not name.startswith("OUTBOXD_")}
    env["OUTBOXD_ADMIN_LISTEN"] = ""
    return env


def run_host(binary: Path, config: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``outboxd --config <config> <args…>``; fails the test with the host's output unless it
    exits 0 within :data:`RUN_TIMEOUT_S`."""
    command = [str(binary), "--config", str(config), *args]
    try:
        done = subprocess.run(
            command,
            env=host_env(),
            capture_output=True,
            text=True,
            timeout=RUN_TIMEOUT_S,
            check=False,
        )
    except subprocess.TimeoutExpired as error:
        out, err = (
            part.decode(errors="replace") if isinstance(part, bytes) else part or ""
            for part in (error.stdout, error.stderr)
        )
        raise AssertionError(
            f"{' '.join(command)} did not finish in {RUN_TIMEOUT_S}s\n"
            f"stdout:\n{out}\nstderr:\n{err}"
        ) from None
    if done.returncode != 0:
        raise AssertionError(
            f"{' '.join(command)} exited {done.returncode}\n"
            f"stdout:\n{done.stdout}\nstderr:\n{done.stderr}"
        )
    return done
