"""Where things are in the repository."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

#: The repository root (tests/support/paths.py → support → tests → python → producers → root).
REPO = Path(__file__).resolve().parents[4]
PRODUCER = REPO / "producers" / "python"
GOLDEN = REPO / "producers" / "golden" / "envelopes.json"
PROTO = REPO / "proto" / "outbox" / "v1" / "envelope.proto"
MIGRATIONS = REPO / "migrations"


def golden() -> dict[str, Any]:
    """producers/golden/envelopes.json, parsed."""
    data: dict[str, Any] = json.loads(GOLDEN.read_text(encoding="utf-8"))
    return data
