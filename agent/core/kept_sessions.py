"""Kept sessions: tool sessions a server keeps for remote owners, by id and access token.

Some clients manage their sandboxes themselves (E2B's SDK: create, connect,
list, kill, set a timeout, pause, resume). A face speaking for them keeps each
as a `KeptSession`: the door's `ToolSession` plus who owns it, its access
token, when it ends, and a turn that lets one call (an execution, a file
operation) run at a time, so a cancel reaches only the call that runs and its
output only the caller that asked. `KeptSessions` is the registry of one
server: lookups are by owner (another owner's session is not found, never
forbidden) or by id and token; `tick()` kills what is past its end and
releases idle sandboxes (their state comes back by replay at the next call).

The server that hosts the face answers for keys and slots (`SessionHost`):
who an API key is, whether a session may open (a conversation slot, its
data, the recorder that accounts for its runs), and what to free at its end.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import threading
import time
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Generic, Protocol, TypeVar

from sbx.agent.core.app import App
from sbx.agent.core.namespaces import clear_variables, drop_namespace, in_namespace
from sbx.agent.core.run_recorder import NoRecorder, RunRecorder
from sbx.agent.core.sandbox_files import FileOp, file_op, read_file, write_file
from sbx.agent.core.tool_session import CallReport, ToolSession
from sbx.agent.core.workspace import ConversationSpec, Workspace
from sbx.sandbox.closing import Closing
from sbx.sandbox.errors import SbxError

logger = logging.getLogger(__name__)

MAX_LIFETIME_S = 24 * 3600
"""The longest a kept session may be asked to live from now."""
Sink = Callable[[str, str], None]
"""`sink(stream, text)`: output of the running call, as it comes."""
_ENVS = r'''
import os, sys, types
held = sys.modules.setdefault("_sbx_envs", types.ModuleType("_sbx_envs"))
if SAVE:
    held.saved = {key: os.environ.get(key) for key in ENVS}
os.environ.update(ENVS)
if CWD:
    os.chdir(CWD)
'''
_ENVS_BACK = r'''
import os, sys
for key, value in sys.modules["_sbx_envs"].saved.items():
    if value is None:
        os.environ.pop(key, None)
    else:
        os.environ[key] = value
'''
"""Programs (each run in a namespace of its own) that set env vars in a sandbox (and the
session's working directory), saving what a call's own envs replace, and put the saved
values back after it."""


def _set_envs(envs: Mapping[str, str], *, save: bool, cwd: str | None = None) -> str:
    values = {"ENVS": dict(envs), "SAVE": save, "CWD": cwd}
    return f"exec({_ENVS!r}, {values!r})\n"


@dataclass(frozen=True, kw_only=True)
class Owner:
    """Who a request comes from, as the host authenticated its API key."""

    principal: str
    team: str | None = None
    grant: object = None
    """The host's record of the key, handed back to it with `admit`."""


@dataclass(frozen=True, kw_only=True)
class Admitted:
    """What a new session gets: its `/data` files and who accounts for its executions."""

    data: tuple[Path, ...] = ()
    recorder: RunRecorder = field(default_factory=NoRecorder)


class SessionHost(Protocol):
    """The server a face keeps sessions in; thread-safe (called from worker threads)."""

    app: App
    output_root: Path
    idle_s: float
    """A session idle this long releases its sandbox (its state comes back on use)."""

    def authenticate(self, api_key: str) -> Owner:
        """The owner of a live key; raises the face's refusal otherwise."""
        ...

    def admit(self, owner: Owner, session_id: str) -> Admitted:
        """Let a session open (a conversation slot), or raise the face's refusal."""
        ...

    def release(self, owner: Owner, session_id: str) -> None:
        """The session ended (killed or timed out): free what `admit` took."""
        ...


class SessionNotFound(SbxError):
    """No such live session for this caller (another owner's looks the same)."""


class KeptSession(ToolSession):
    """One kept session: a tool session, its owner, token, end and turn; thread-safe."""

    def __init__(self, *, session_id: str, workspace: Workspace, owner: Owner,
                 recorder: RunRecorder, envs: Mapping[str, str], run_kind: Any,
                 on_close: Callable[[], None], cwd: str | None = None) -> None:
        super().__init__(session_id=session_id, workspace=workspace, recorder=recorder,
                         run_kind=run_kind)
        self.owner = owner
        self.envs = dict(envs)
        """Env vars set in every sandbox of the session (before its first execution)."""
        self.cwd = cwd
        """The working directory of the session's own namespace (None: the sandbox's)."""
        self.token = secrets.token_urlsafe(24)
        """The access token: given only to its owner's callers."""
        self.started_at = time.time()
        self.end_at = 0.0
        """Killed at this time unless moved (`KeptSessions.set_timeout`)."""
        self.paused = False
        """Its sandbox was released on request or when idle; state comes back on use."""
        self.killed = False
        """Killed (or timed out): a call still running is cut, not finished."""
        self.turn = threading.RLock()
        """One call at a time (an execution, a file operation)."""
        self.namespaces: dict[str, str] = {}
        """Named namespaces besides the session's own: name to working directory."""
        self._on_close = on_close
        self._started = not envs and cwd is None

    def python(self, code: str, *, on_output: Sink | None = None,
               on_start: Callable[[], None] | None = None,
               envs: Mapping[str, str] | None = None,
               namespace: str | None = None) -> CallReport:
        """One program through the gate (audited, a run of the owner's quotas); its report.

        `on_start()` once it is admitted, `on_output(stream, text)` while it runs.
        `envs` hold for this program only: a program before it sets them and one after
        restores them (two more runs, both audited). `namespace`: run in that named
        namespace (`open_namespace`) rather than the session's own. A refusal (a quota)
        is raised before anything ran. After a timeout or a kill the sandbox is
        replaced, so the next call replays the journal into a new one.
        """
        if namespace is not None:
            code = in_namespace(code, namespace, self._namespace(namespace),
                                printed=not self.workspace.spec.values_as_results)
        with self.turn:
            self._start()
            if envs:
                self.call("execute_python", {"code": _set_envs(envs, save=True)})
            try:
                return self._replaced_if_reset(self.call(
                    "execute_python", {"code": code}, on_output=on_output, on_start=on_start))
            finally:
                if envs:
                    self.call("execute_python", {"code": f"exec({_ENVS_BACK!r}, {{}})\n"})

    def open_namespace(self, cwd: str) -> str:
        """A new namespace of its own, working in `cwd` (made at its first use); its name."""
        name = "ns-" + secrets.token_hex(6)
        self.namespaces[name] = cwd
        return name

    def reset_namespace(self, name: str | None = None, *, remove: bool = False) -> None:
        """Empty the namespace `name` (None: the session's own, whose named ones stay).

        `remove`: forget a named one as well.
        """
        if name is not None:
            self._namespace(name)
        with self.turn:
            self.python(clear_variables() if name is None else drop_namespace(name))
            if remove and name is not None:
                self.namespaces.pop(name, None)

    def _namespace(self, name: str) -> str:
        try:
            return self.namespaces[name]
        except KeyError:
            raise SessionNotFound(f"no namespace {name!r} in this sandbox") from None

    def command(self, command: str, *, cwd: str, envs: Mapping[str, str],
                on_output: Sink | None = None,
                on_start: Callable[[], None] | None = None) -> CallReport:
        """A shell command through the gate (`run_command`, when the policy enables it).

        The session's env vars hold for it, `envs` besides them; its report's execution
        has the output and `exit_code`.
        """
        with self.turn:
            self._start()
            return self.call("run_command",
                             {"command": command, "cwd": cwd, "envs": dict(envs)},
                             on_output=on_output, on_start=on_start)

    def _replaced_if_reset(self, report: CallReport) -> CallReport:
        """After a timeout or a kill, the sandbox is replaced: the next call replays."""
        execution = report.outcome.execution
        if execution is not None and execution.state_reset:
            self.discard("its interpreter was restarted after a timeout or a kill")
        return report

    def _start(self) -> None:
        """At the session's first call: its env vars and working directory (no run)."""
        if not self._started:
            self._started = True
            self.call("execute_python",
                      {"code": _set_envs(self.envs, save=False, cwd=self.cwd)}, charged=False)

    def file(self, op: FileOp, path: str, **args: Any) -> Any:
        """One file operation at a sandbox path, in its turn (`sbx.agent.file_op`'s values).

        `read` gives the bytes, `write` takes `data` as bytes. Raises `FileOpError`.
        """
        with self.turn:
            self._start()  # the session's first call starts it, whichever it is
            if op == "read":
                return read_file(self, path)
            if op == "write":
                return write_file(self, path, args["data"])
            return file_op(self, op, path, **args)

    def closed(self) -> None:
        """The host frees the session's slot, whatever failed before."""
        self._on_close()


S = TypeVar("S", bound=KeptSession, covariant=True)
Make = Callable[..., S]
"""Builds the face's session from `KeptSession`'s keyword arguments."""


class KeptSessions(Closing, Generic[S]):
    """Every live kept session of one server, by owner and id; thread-safe."""

    def __init__(self, host: SessionHost, make: Make[S], *, prefix: str,
                 values_as_results: bool = False) -> None:
        """Sessions made by `make`, with ids starting `prefix`.

        `values_as_results`: a cell's trailing value is a rich result only, never printed
        (a notebook's stdout, which E2B's SDK shows as the cell's logs).
        """
        self.host = host
        self._make = make
        self._prefix = prefix
        self._values_as_results = values_as_results
        self._lock = threading.Lock()
        self._live: dict[str, S] = {}
        """By id (random, unique); each knows its owner."""

    def create(self, owner: Owner, *, timeout_s: float, envs: Mapping[str, str],
               run_kind: Any, **extra: Any) -> S:
        """A new session of `owner` (its sandbox opens at the first call).

        `extra` goes to the face's `make`. Raises `ValueError` for a timeout out of range,
        and the host's refusal when it admits no more.
        """
        _check_lifetime(timeout_s)
        session_id = self._prefix + secrets.token_hex(8)
        admitted = self.host.admit(owner, session_id)
        spec = ConversationSpec(conversation_id=session_id, principal=owner.principal,
                                team=owner.team, data=admitted.data,
                                output_root=self.host.output_root,
                                values_as_results=self._values_as_results)
        try:
            session = self.host.app.tool_session(spec, build=lambda workspace: self._make(
                session_id=session_id, workspace=workspace, owner=owner,
                recorder=admitted.recorder, envs=envs, run_kind=run_kind,
                on_close=lambda: self.host.release(owner, session_id), **extra))
        except BaseException:
            self.host.release(owner, session_id)
            raise
        self.set_timeout(session, timeout_s)
        with self._lock:
            self._live[session_id] = session
        return session

    def find(self, owner: Owner, session_id: str) -> S:
        """The owner's live session, or `SessionNotFound` (never another owner's)."""
        with self._lock:
            session = self._live.get(session_id)
        if (session is None or session.owner.principal != owner.principal
                or session.end_at <= time.time()):
            raise SessionNotFound(f"sandbox {session_id!r} not found")
        return session

    def by_token(self, session_id: str, token: str | None) -> S:
        """The session whose access token is `token` (a sandbox URL without an API key)."""
        with self._lock:
            session = self._live.get(session_id)
        if session is None or not token or not secrets.compare_digest(session.token, token):
            raise SessionNotFound(f"sandbox {session_id!r} not found")
        return session

    def live(self) -> list[S]:
        """Every live session (the host shares its cap between keys)."""
        with self._lock:
            return list(self._live.values())

    def of(self, owner: Owner) -> list[S]:
        """The owner's live sessions."""
        return [s for s in self.live() if s.owner.principal == owner.principal]

    def set_timeout(self, session: KeptSession, timeout_s: float) -> None:
        """The session is killed `timeout_s` from now unless told again (`ValueError`)."""
        _check_lifetime(timeout_s)
        session.end_at = time.time() + timeout_s

    def pause(self, session: KeptSession) -> None:
        """Release its sandbox now; its variables come back at the next call."""
        session.paused = True
        session.discard_if_idle(0.0, reason="the client paused the sandbox")

    def kill(self, session: KeptSession) -> None:
        """End it: a running call is cancelled, the sandbox removed, `run_end` audited."""
        with self._lock:
            self._live.pop(session.id, None)
        session.killed = True
        session.close()

    def tick(self) -> None:
        """Kill sessions past their end; release idle sandboxes (one heartbeat)."""
        now = time.time()
        for session in self.live():
            try:
                if session.end_at <= now:
                    self.kill(session)
                elif session.discard_if_idle(self.host.idle_s):
                    session.paused = True
            except Exception:  # the others are still looked after
                logger.warning("looking after session %s failed", session.id, exc_info=True)

    @asynccontextmanager
    async def looked_after(self, tick_s: float) -> AsyncIterator[None]:
        """While an async server serves: `tick()` every `tick_s`, and `close()` at its end."""
        async def look_after() -> None:
            while True:
                await asyncio.sleep(tick_s)
                await asyncio.to_thread(self.tick)

        task = asyncio.create_task(look_after())
        try:
            yield
        finally:
            task.cancel()
            await asyncio.to_thread(self.close)

    def close(self) -> None:
        """Kill every session (the server stops)."""
        with self._lock:
            sessions, self._live = list(self._live.values()), {}
        for session in sessions:
            try:
                session.close()
            except Exception:
                logger.warning("closing session %s failed", session.id, exc_info=True)


def _check_lifetime(seconds: float) -> None:
    if not 0 < seconds <= MAX_LIFETIME_S:
        raise ValueError(f"timeout: between 1 and {MAX_LIFETIME_S} seconds")


async def streamed(run: Callable[[Sink, Callable[[], None]], CallReport],
                   cancel: Callable[[], None]) -> AsyncGenerator[tuple[str, Any], None]:
    """A blocking call heard as it goes, for an async face: its events, in order.

    `run(on_output, on_start)` runs in a worker thread; this yields `("started",
    None)` once it is admitted, `(stream, text)` for its output as it comes, and
    `("done", report)` last. What it raises (a refusal before it ran, the session
    ended) is raised here. A consumer that stops early (its client went away) has
    `cancel()` called, which stops the call.
    """
    loop = asyncio.get_running_loop()
    events: asyncio.Queue[tuple[str, Any]] = asyncio.Queue()

    def put(kind: str, value: Any = None) -> None:
        loop.call_soon_threadsafe(events.put_nowait, (kind, value))

    def work() -> None:
        try:
            put("done", run(put, lambda: put("started")))
        except Exception as exc:
            put("failed", exc)

    loop.run_in_executor(None, work)
    finished = False
    try:
        while True:
            kind, value = await events.get()
            finished = kind in ("done", "failed")
            if kind == "failed":
                raise value
            yield kind, value
            if finished:
                return
    finally:
        if not finished:
            loop.run_in_executor(None, cancel)
