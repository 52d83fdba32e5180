"""Fixtures for the service tests: a real `sbx serve` process, a real store, a real HTTP client.

    store      "sqlite" or "postgresql" (parametrized): a fresh database URL per test
    serve      start(...) a server process on a free loopback port; stopped with SIGTERM
               at teardown, which must exit 0 (a clean drain)
    llm        the scripted model the test's servers talk to (every turn must be consumed)

PostgreSQL is a throwaway cluster of Debian's binaries (`initdb`, `pg_ctl`),
run as `nobody` when the tests run as root, listening only on a Unix socket
in a temporary directory, one database per test, stopped at the end of the
session. Without the binaries the PostgreSQL tests fail in CI (CI=true) and
skip elsewhere, naming what is missing.

A test module binds these at module level:

    store = service_support.store
    serve = service_support.serve
    llm = service_support.llm
"""

from __future__ import annotations

import contextlib
import glob
import json
import os
import queue
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy.orm import Session

import scripted_llm
from conftest import TEST_IMAGE
from sbx.agent.core.hosting.store.db import Database
from sbx.agent.core.hosting.store.keys import create_key
from sbx.agent.testing.scripted_model import ScriptedLLM
from sbx.sandbox.config import OWNER_LABEL
from sbx.sandbox.gc import owner_tag

SBX = [sys.executable, "-c", "from sbx.agent.cli.main import main; main()"]
FAKE_KEY = "sk-test-SCRIPTED0123456789abcdefghijkl"
START_TIMEOUT_S = 90.0
EXIT_TIMEOUT_S = 120.0
BASE_POLICY: dict[str, dict[str, Any]] = {
    "tools.execute_python": {"enabled": True},
    "tools.list_data_files": {"enabled": True},
    "sandbox": {"timeout": "60s"},
    "service": {"heartbeat": "0.5s", "stale_after": "5s"},
}


# ------------------------------------------------------------------ PostgreSQL


def _pg_bindir() -> Path | None:
    found = shutil.which("pg_ctl")
    if found:
        return Path(found).resolve().parent
    candidates = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"))
    return Path(candidates[-1]).parent if candidates else None


@dataclass
class PgCluster:
    """A running throwaway PostgreSQL cluster reachable through a Unix socket."""

    root: Path
    bindir: Path
    run_as: list[str]
    created: int = 0

    def url(self, database: str) -> str:
        return f"postgresql://sbx@/{database}?host={self.root}"

    def new_database(self) -> str:
        self.created += 1
        name = f"sbx_test_{self.created}_{uuid.uuid4().hex[:6]}"
        db = Database.open(self.url("postgres"))
        try:
            with db.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
                conn.exec_driver_sql(f'CREATE DATABASE "{name}"')
        finally:
            db.close()
        return self.url(name)

    def stop(self) -> None:
        subprocess.run([*self.run_as, str(self.bindir / "pg_ctl"), "-D", str(self.root / "data"),
                        "-m", "immediate", "stop"], capture_output=True, timeout=60)


@pytest.fixture(scope="session")
def pg_cluster() -> Iterator[PgCluster]:
    """A PostgreSQL cluster for the session (fails in CI, skips elsewhere, without binaries)."""
    bindir = _pg_bindir()
    if bindir is None or not (bindir / "initdb").exists():
        message = "PostgreSQL binaries (initdb, pg_ctl) not found: apt-get install postgresql"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    root = Path(tempfile.mkdtemp(prefix="sbx-pg-"))  # pytest's tmp dirs are private to root
    run_as: list[str] = []
    if os.geteuid() == 0:  # initdb refuses root: run the cluster as nobody
        shutil.chown(root, user="nobody")
        run_as = ["runuser", "-u", "nobody", "--"]
    cluster = PgCluster(root=root, bindir=bindir, run_as=run_as)
    options = f"-k {root} -c listen_addresses='' -c fsync=off -c max_connections=200"
    for command in (
        [str(bindir / "initdb"), "-D", str(root / "data"), "-U", "sbx", "--auth=trust",
         "-E", "UTF8", "--no-sync", "-N"],
        [str(bindir / "pg_ctl"), "-D", str(root / "data"), "-l", str(root / "log"), "-o",
         options, "-w", "start"],
    ):
        done = subprocess.run([*run_as, *command], capture_output=True, text=True, timeout=120)
        if done.returncode != 0:
            shutil.rmtree(root, ignore_errors=True)
            pytest.fail(f"cannot start PostgreSQL ({command[0]}): {done.stdout}{done.stderr}")
    try:
        yield cluster
    finally:
        cluster.stop()
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(params=["sqlite", "postgresql"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A fresh database URL: SQLite in the test's data dir, or a new PostgreSQL database."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'data' / 'sbx.db'}"
    cluster: PgCluster = request.getfixturevalue("pg_cluster")
    return cluster.new_database()


@pytest.fixture
def postgres(pg_cluster: PgCluster) -> str:
    """A fresh PostgreSQL database URL (for tests about replicas)."""
    return pg_cluster.new_database()


# ------------------------------------------------------------------ the scripted model


llm = scripted_llm.llm
"""The scripted model the test's servers talk to; every turn must be consumed."""


# ------------------------------------------------------------------ servers


def policy_text(overrides: dict[str, dict[str, Any]] | None = None) -> str:
    """A policy file: the tests' base tables with `overrides` merged in, as TOML."""
    tables = {name: dict(values) for name, values in BASE_POLICY.items()}
    for name, values in (overrides or {}).items():
        tables.setdefault(name, {}).update(values)
    lines = []
    for name, values in tables.items():
        lines.append(f"[{name}]")
        lines += [f"{key} = {json.dumps(value)}" for key, value in values.items()]
    return "\n".join(lines) + "\n"


@dataclass
class Server:
    """One running `sbx serve` process."""

    proc: subprocess.Popen[str]
    url: str
    database: str
    data_dir: Path
    pump: threading.Thread
    lines: list[str] = field(default_factory=list)
    clients: list[httpx.Client] = field(default_factory=list)

    @property
    def log(self) -> str:
        return "".join(self.lines)

    @property
    def audit_log(self) -> Path:
        return self.data_dir / "audit.jsonl"

    def client(self, key: str | None = None, **kwargs: Any) -> httpx.Client:
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        client = httpx.Client(base_url=self.url, headers=headers, timeout=120, **kwargs)
        self.clients.append(client)
        return client

    def key(self, name: str, *, team: str | None = None, **overrides: Any) -> str:
        """A new API key in this server's store (in `team`, with its quota `overrides`)."""
        db = Database.open(self.database)
        try:
            return create_key(db, name, overrides=overrides, team=team)
        finally:
            db.close()

    @contextlib.contextmanager
    def stored(self) -> Iterator[Session]:
        """A read session on this server's store, for what the API does not show."""
        db = Database.open(self.database)
        try:
            with db.read() as session:
                yield session
        finally:
            db.close()

    def stop(self, sig: int = signal.SIGTERM) -> int:
        """Signal the server and wait for it to exit; its exit code."""
        for client in self.clients:
            client.close()
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        code = self.proc.wait(EXIT_TIMEOUT_S)
        self.pump.join(10)
        if self.proc.stderr is not None:
            self.proc.stderr.close()
        return code


def start_server(*, database: str, data_dir: Path, llm: ScriptedLLM, policy: Path,
                 args: tuple[str, ...] = (), env: dict[str, str] | None = None) -> Server:
    """Start `sbx serve` on a free port and wait for its listening line (not a sleep)."""
    env = {**os.environ, "OPENAI_BASE_URL": llm.base_url, "OPENAI_API_KEY": FAKE_KEY,
           "SBX_MODEL": "scripted", **(env or {})}
    env.pop("SBX_AUDIT_LOG", None)
    env.pop("SBX_DATABASE_URL", None)
    proc = subprocess.Popen(
        [*SBX, "serve", "--port", "0", "--database", database, "--data-dir", str(data_dir),
         "--policy", str(policy), "--image", TEST_IMAGE, "--log-level", "warning", *args],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env,
    )
    lines: list[str] = []
    ready: queue.Queue[str | None] = queue.Queue()

    def pump() -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            lines.append(line)
            if "listening on" in line:
                ready.put(line)
        ready.put(None)

    reader = threading.Thread(target=pump, daemon=True)
    reader.start()
    try:
        line = ready.get(timeout=START_TIMEOUT_S)
    except queue.Empty:
        line = None
    if line is None:
        proc.kill()
        proc.wait()
        reader.join(10)
        pytest.fail("sbx serve did not start:\n" + "".join(lines))
    url = line.split("listening on ", 1)[1].split()[0]
    assert url.startswith("http://127.0.0.1:"), url  # loopback unless told otherwise
    return Server(proc=proc, url=url, database=database, data_dir=data_dir, pump=reader,
                  lines=lines)


@pytest.fixture
def serve(llm: ScriptedLLM, tmp_path: Path, engine: object, request: pytest.FixtureRequest
          ) -> Iterator[Callable[..., Server]]:
    """`serve(database, policy=, args=, data_dir=, env=)` starts a server; all are stopped with
    SIGTERM at teardown and must exit 0. A failed test's report shows their logs."""
    started: list[Server] = []
    request.node.sbx_servers = started  # read by conftest's report hook

    def start(database: str, *, policy: dict[str, dict[str, Any]] | None = None,
              args: tuple[str, ...] = (), data_dir: Path | None = None,
              env: dict[str, str] | None = None) -> Server:
        path = tmp_path / f"policy-{len(started)}.toml"
        path.write_text(policy_text(policy))
        server = start_server(database=database, data_dir=data_dir or tmp_path / "data",
                              llm=llm, policy=path, args=args, env=env)
        started.append(server)
        return server

    yield start
    codes = []
    for server in started:
        with contextlib.suppress(subprocess.TimeoutExpired):
            codes.append((server.stop(), server))
    bad = [(code, s.log[-3000:]) for code, s in codes if code not in (0, -signal.SIGKILL)]
    assert not bad, f"a server did not stop cleanly: {bad}"


# ------------------------------------------------------------------ helpers


def wait_for(condition: Callable[[], Any], *, timeout: float = 180.0, what: str = "") -> Any:
    """Poll `condition` until it returns something truthy (the event waited on), or fail."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what or condition}")
        time.sleep(0.05)


def sse_events(response: httpx.Response) -> Iterator[dict[str, Any]]:
    """Parse a text/event-stream response into `{"id", "event", "data"}` dicts."""
    event: dict[str, Any] = {}
    for line in response.iter_lines():
        if not line:
            if event:
                yield event
            event = {}
        elif line.startswith(":"):
            continue
        else:
            name, _, value = line.partition(": ")
            event[name] = json.loads(value) if name == "data" else value


def stream(client: httpx.Client, run_id: str, *, after: int | None = None
           ) -> list[dict[str, Any]]:
    """Every event of a run (after `after`), until the server closes the stream at its end."""
    headers = {"Last-Event-ID": str(after)} if after is not None else {}
    with client.stream("GET", f"/v1/runs/{run_id}/events", headers=headers) as response:
        assert response.status_code == 200, response.read()
        assert response.headers["content-type"].startswith("text/event-stream")
        return list(sse_events(response))


def ask_run(client: httpx.Client, conversation: str, question: str) -> dict[str, Any]:
    """Ask in `conversation`, follow the run's events to its `run_end`, return the stored run."""
    posted = client.post(f"/v1/conversations/{conversation}/questions",
                         json={"question": question})
    assert posted.status_code == 202, posted.text
    run_id = posted.json()["run_id"]
    assert stream(client, run_id)[-1]["event"] == "run_end"
    return dict(client.get(f"/v1/runs/{run_id}").json())


def upload(client: httpx.Client, name: str, content: bytes) -> httpx.Response:
    """POST one file to /v1/datasets."""
    return client.post("/v1/datasets", files={"file": (name, content, "application/octet-stream")})


def managed_containers(engine: Any, label: str) -> list[dict[str, Any]]:
    """Containers carrying `label` (e.g. `sbx.run_id=run-...`)."""
    return list(engine.api.containers(all=True, filters={"label": label}))


def server_containers(engine: Any, server: Server) -> list[dict[str, Any]]:
    """Containers the server process created (its owner label), warm pool included."""
    return managed_containers(engine, f"{OWNER_LABEL}={owner_tag(server.proc.pid)}")
