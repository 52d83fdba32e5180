"""Helpers for the E2B face's tests: E2B's own SDK pointed at a real `sbx serve`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from service_support import Server


def point_sdk_at(monkeypatch: pytest.MonkeyPatch, server: Server, key: str) -> None:
    """Only the SDK's own settings: where the control plane and sandbox URL are, and the key."""
    monkeypatch.setenv("E2B_API_URL", f"{server.url}/e2b/api")
    monkeypatch.setenv("E2B_SANDBOX_URL", f"{server.url}/e2b/sandbox")
    monkeypatch.setenv("E2B_API_KEY", key)
    monkeypatch.delenv("E2B_DOMAIN", raising=False)
    monkeypatch.delenv("E2B_DEBUG", raising=False)


def audit_records(server: Server) -> list[dict[str, Any]]:
    """The server's audit log, record by record."""
    path: Path = server.audit_log
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
