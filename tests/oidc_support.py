"""A real OpenID Connect provider for the sign-in tests: tests/oidc/provider.mjs under Node.

    provider = oidc_provider()          started: its issuer URL is known (port chosen by it)
    server = serve(db, policy=oidc_policy(provider.issuer), env=OIDC_ENV)
    provider.register(server.url)       its one client now redirects to that server: it serves

The provider is panva's `oidc-provider` (installed by setup.sh: `npm ci` in tests/oidc).
Every wait is on a line it prints, never a sleep; it is stopped at teardown.
"""

from __future__ import annotations

import os
import queue
import shutil
import subprocess
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

FOLDER = Path(__file__).resolve().parent / "oidc"
CLIENT_ID = "sbx-test"
SECRET_ENV = "SBX_TEST_OIDC_SECRET"
OIDC_ENV = {SECRET_ENV: "sbx-test-secret"}
"""The environment `sbx serve` needs for `oidc_policy`'s client secret."""
START_TIMEOUT_S = 60.0


def oidc_policy(issuer: str, **extra: Any) -> dict[str, dict[str, Any]]:
    """The policy tables of a server signing in through `issuer` (admins: group sbx-admins)."""
    table = {"issuer": issuer, "client_id": CLIENT_ID, "client_secret_env": SECRET_ENV,
             "scopes": ["openid", "email", "groups"], "principal_claim": "email",
             "role_claim": "groups", "admin_values": ["sbx-admins"], **extra}
    return {"service.oidc": table}


@dataclass
class Provider:
    """One running provider process."""

    proc: subprocess.Popen[str]
    issuer: str
    lines: queue.Queue[str | None]
    log: list[str] = field(default_factory=list)
    pump: threading.Thread | None = None

    def register(self, server_url: str) -> None:
        """Give the client its redirect URI (the server's callback) and wait until it serves."""
        assert self.proc.stdin is not None
        self.proc.stdin.write(server_url + "/web/oidc/callback\n")
        self.proc.stdin.flush()
        _wait_line(self, "listening ")

    def stop(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        if self.proc.poll() is None:
            self.proc.terminate()
        try:
            self.proc.wait(20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        if self.pump is not None:
            self.pump.join(10)  # it ends at the output's end, now that the process is gone
        if self.proc.stdout is not None:
            self.proc.stdout.close()


def _wait_line(provider: Provider, prefix: str) -> str:
    while True:
        try:
            line = provider.lines.get(timeout=START_TIMEOUT_S)
        except queue.Empty:
            line = None
        if line is None:
            provider.stop()
            pytest.fail(f"the OpenID Connect provider did not print {prefix!r}:\n"
                        + "".join(provider.log))
        if line.startswith(prefix):
            return line


def _require_provider() -> str:
    node = shutil.which("node")
    if node is None or not (FOLDER / "node_modules" / "oidc-provider").is_dir():
        message = ("the test OpenID Connect provider is not installed: run setup.sh "
                   "(it runs `npm ci` in tests/oidc)")
        if os.environ.get("CI") or node is not None:
            pytest.fail(message)
        pytest.skip(message)
    return node


@pytest.fixture
def oidc_provider() -> Iterator[Callable[[], Provider]]:
    """`oidc_provider()` starts a provider (see the module doc); all are stopped at teardown."""
    started: list[Provider] = []

    def start() -> Provider:
        proc = subprocess.Popen([_require_provider(), "provider.mjs"], cwd=FOLDER,
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True)
        lines: queue.Queue[str | None] = queue.Queue()
        provider = Provider(proc=proc, issuer="", lines=lines)
        started.append(provider)

        def pump() -> None:
            assert proc.stdout is not None
            for line in proc.stdout:
                provider.log.append(line)
                lines.put(line)
            lines.put(None)

        provider.pump = threading.Thread(target=pump, daemon=True)
        provider.pump.start()
        port = _wait_line(provider, "port ").split()[1]
        provider.issuer = f"http://127.0.0.1:{int(port)}"
        return provider

    yield start
    for provider in started:
        provider.stop()
