"""E2B sandboxes: each one the door's `ToolSession`, under the key that created it.

A sandbox lives from `create` until `kill` or its E2B timeout (`end_at`,
which `set_timeout` moves). Its container is released when idle for the
host's `idle_s`, or on `pause`; its executions are then replayed into a new
one at the next call, so a resumed or reconnected sandbox has its variables
back. Lookups are by (principal, id): another key's sandbox is not found.
"""

from __future__ import annotations

import logging
import secrets
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from sbx.agent import (
    CallReport,
    Closing,
    ConversationSpec,
    RunRecorder,
    ToolSession,
    Workspace,
)
from sbx.agent.e2b.host import E2bHost, Refused, Tenant

logger = logging.getLogger(__name__)

Sink = Callable[[str, str], None]
"""`sink(stream, text)`: output of the running execution, as it comes."""
_ENVS = r'''
import os, sys, types
held = sys.modules.setdefault("_sbx_e2b_envs", types.ModuleType("_sbx_e2b_envs"))
if SAVE:
    held.saved = {key: os.environ.get(key) for key in ENVS}
os.environ.update(ENVS)
'''
_ENVS_BACK = r'''
import os, sys
for key, value in sys.modules["_sbx_e2b_envs"].saved.items():
    if value is None:
        os.environ.pop(key, None)
    else:
        os.environ[key] = value
'''
"""Programs (each run in a namespace of its own) that set env vars in a sandbox, saving
what an execution's own envs replace, and put the saved values back after it."""


def _set_envs(envs: Mapping[str, str], *, save: bool) -> str:
    return f"exec({_ENVS!r}, {{'ENVS': {dict(envs)!r}, 'SAVE': {save!r}}})\n"


MAX_TIMEOUT_S = 24 * 3600
"""The longest E2B timeout a sandbox may ask for (E2B's own ceiling for paid plans)."""


@dataclass(kw_only=True)
class Info:
    """What the control plane says about a sandbox."""

    template: str
    metadata: dict[str, str]
    envs: dict[str, str]
    started_at: float = field(default_factory=time.time)
    end_at: float = 0.0
    paused: bool = False


class E2bSandbox(ToolSession):
    """One E2B sandbox: a tool session, its access token, its E2B facts; thread-safe."""

    def __init__(self, *, sandbox_id: str, workspace: Workspace, tenant: Tenant,
                 recorder: RunRecorder, info: Info, on_close: Callable[[], None]) -> None:
        super().__init__(session_id=sandbox_id, workspace=workspace, recorder=recorder,
                         run_kind="e2b")
        self.tenant = tenant
        self.info = info
        self.token = secrets.token_urlsafe(24)
        """The sandbox's access token (`X-Access-Token`): given only to its key's callers."""
        self.executions = 0
        """The code interpreter's `execution_count`."""
        self.turn = threading.RLock()
        """One call at a time (an execution, a file operation): a cancel reaches only the
        call that runs, and its output only the stream that asked for it."""
        self.contexts: dict[str, str] = {}
        """The code contexts created besides `default`: id to E2B working directory."""
        self.killed = False
        """Killed (or timed out): a call still running is cut, not finished."""
        self._on_close = on_close
        self._envs_set = not info.envs

    def python(self, code: str, *, on_output: Sink | None = None,
               on_start: Callable[[], None] | None = None,
               envs: Mapping[str, str] | None = None) -> CallReport:
        """One program through the gate (audited, a run of the key's quotas); its report.

        `on_start()` once it is admitted, `on_output(stream, text)` while it runs.
        `envs` hold for this program only: a program before it sets them and one after
        restores them (two more runs, both audited). Raises `Refused` (a quota) before
        anything ran.
        """
        with self.turn:
            if not self._envs_set:
                self._envs_set = True
                self.call("execute_python", {"code": _set_envs(self.info.envs, save=False)})
            if envs:
                self.call("execute_python", {"code": _set_envs(envs, save=True)})
            try:
                report = self.call("execute_python", {"code": code}, on_output=on_output,
                                   on_start=on_start)
                execution = report.outcome.execution
                if execution is not None and execution.state_reset:
                    # replaced, so the next call replays the journal into a new sandbox
                    self.discard("its interpreter was restarted after a timeout or a kill")
                return report
            finally:
                if envs:
                    self.call("execute_python", {"code": f"exec({_ENVS_BACK!r}, {{}})\n"})

    def closed(self) -> None:
        """The host frees the sandbox's slot, whatever failed before."""
        self._on_close()


class Sandboxes(Closing):
    """Every live E2B sandbox of one server, by principal and id; thread-safe."""

    def __init__(self, host: E2bHost) -> None:
        self.host = host
        self._lock = threading.Lock()
        self._live: dict[str, E2bSandbox] = {}
        """By id (random, unique); each knows its principal."""

    def create(self, tenant: Tenant, *, template: str, timeout_s: float,
               metadata: Mapping[str, str], envs: Mapping[str, str]) -> E2bSandbox:
        """A new sandbox of `tenant` (its container opens at the first call)."""
        sandbox_id = "e2b-" + secrets.token_hex(8)
        admitted = self.host.admit(tenant, sandbox_id)
        spec = ConversationSpec(conversation_id=sandbox_id, principal=tenant.principal,
                                team=tenant.team, data=admitted.data,
                                output_root=self.host.output_root)
        info = Info(template=template, metadata=dict(metadata), envs=dict(envs))
        try:
            sandbox = self.host.app.tool_session(spec, build=lambda workspace: E2bSandbox(
                sandbox_id=sandbox_id, workspace=workspace, tenant=tenant,
                recorder=admitted.recorder, info=info,
                on_close=lambda: self.host.release(tenant, sandbox_id)))
        except BaseException:
            self.host.release(tenant, sandbox_id)
            raise
        self.set_timeout(sandbox, timeout_s)
        with self._lock:
            self._live[sandbox_id] = sandbox
        return sandbox

    def find(self, tenant: Tenant, sandbox_id: str) -> E2bSandbox:
        """The tenant's live sandbox `sandbox_id`, or `Refused(404)` (never another key's)."""
        with self._lock:
            sandbox = self._live.get(sandbox_id)
        if sandbox is None or sandbox.tenant.principal != tenant.principal:
            raise Refused(404, f"sandbox {sandbox_id!r} not found")
        return sandbox

    def by_token(self, sandbox_id: str, token: str | None) -> E2bSandbox:
        """The sandbox whose access token is `token` (the sandbox URL has no API key)."""
        with self._lock:
            sandbox = self._live.get(sandbox_id)
        if sandbox is None or not token or not secrets.compare_digest(sandbox.token, token):
            raise Refused(404, f"sandbox {sandbox_id!r} not found")
        return sandbox

    def live(self) -> list[E2bSandbox]:
        """Every live sandbox (the host shares its cap between keys)."""
        with self._lock:
            return list(self._live.values())

    def of(self, tenant: Tenant) -> list[E2bSandbox]:
        """The tenant's live sandboxes."""
        with self._lock:
            return [s for s in self._live.values() if s.tenant.principal == tenant.principal]

    def set_timeout(self, sandbox: E2bSandbox, timeout_s: float) -> None:
        """The sandbox is killed `timeout_s` from now unless told again."""
        if not 0 < timeout_s <= MAX_TIMEOUT_S:
            raise Refused(400, f"timeout: between 1 and {MAX_TIMEOUT_S} seconds")
        sandbox.info.end_at = time.time() + timeout_s

    def pause(self, sandbox: E2bSandbox) -> None:
        """Release its container now; its variables come back at the next call."""
        sandbox.info.paused = True
        sandbox.discard_if_idle(0.0, reason="the E2B client paused the sandbox")

    def kill(self, sandbox: E2bSandbox) -> None:
        """End it: a running execution is cancelled, the container removed, `run_end` audited."""
        with self._lock:
            self._live.pop(sandbox.id, None)
        sandbox.killed = True
        sandbox.close()

    def tick(self) -> None:
        """Kill sandboxes past their E2B timeout; release idle containers (one heartbeat)."""
        now = time.time()
        with self._lock:
            sandboxes = list(self._live.values())
        for sandbox in sandboxes:
            try:
                if sandbox.info.end_at <= now:
                    self.kill(sandbox)
                elif sandbox.discard_if_idle(self.host.idle_s):
                    sandbox.info.paused = True
            except Exception:  # the others are still looked after
                logger.warning("looking after E2B sandbox %s failed", sandbox.id, exc_info=True)

    def close(self) -> None:
        """Kill every sandbox (the server stops)."""
        with self._lock:
            sandboxes, self._live = list(self._live.values()), {}
        for sandbox in sandboxes:
            try:
                sandbox.close()
            except Exception:
                logger.warning("closing E2B sandbox %s failed", sandbox.id, exc_info=True)
