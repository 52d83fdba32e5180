"""`Workspace`: a sandbox held for one caller, and the gate that guards every call into it.

The tools without a model. A conversation keeps one workspace and opens a
gate per run (per question); a caller that brings its own agent (an MCP
client, `POST /v1/execute`) opens one gate for its whole session and calls
tools through it. Either way the sandbox is opened at first use (from the
pool, holding a host lease), kept between calls so variables persist, and
removed by `discard()` (the code in it dies with it; the next call gets a
fresh one and `reset_pending` says so) or `close()`.

Whoever drives it (a conversation's run, a tool session's call) holds
`in_use()`; an idle sandbox, nobody using it for `idle_timeout`, is removed by
`discard_if_idle`, the one idle release every face's housekeeping calls.

The principal and the owner's id (a conversation's, an MCP session's) reach
every audit record through the gate's `ToolContext`; the caller never
chooses them from model or client input.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from sbx.agent.core.config import AppConfig
from sbx.agent.core.notes import NoteStore, notes_for
from sbx.agent.core.outcomes import LossCause, execution_loss, idle_reason, loss_text
from sbx.agent.core.restore_ready import RestoreReady
from sbx.agent.core.run_recorder import RunKind, RunTicket, new_run_id
from sbx.agent.core.settings import SettingsError
from sbx.agent.core.snapshot import STATE_DIR, Snapshot, take
from sbx.agent.core.spend import SpendLimit
from sbx.agent.core.teams import withhold
from sbx.agent.model.cancellation import Cancellation
from sbx.sandbox.closing import Closing
from sbx.sandbox.datadrop import DropDir
from sbx.sandbox.errors import InvalidInput, SandboxError
from sbx.sandbox.files import data_mounts
from sbx.sandbox.live_output import OutputCallback
from sbx.sandbox.pool import Pool
from sbx.sandbox.result import ExecutionResult
from sbx.sandbox.session import Session
from sbx.sandbox.spec import SessionSpec
from sbx.tools.audit import AuditLog
from sbx.tools.context import Operator, OutputSink, ToolContext
from sbx.tools.gate import ToolGate, build_gate
from sbx.tools.observation_size import CHARS_PER_TOKEN
from sbx.tools.registry import Tool

logger = logging.getLogger(__name__)

QUERY_DIR = "queries"
"""The name of the query drop in the sandbox: `query_sql` results are `/data/queries/NAME`."""


class WorkspaceClosed(SandboxError):
    """Code was sent to a workspace after it closed (its owner ended while a call came in)."""


@dataclass(frozen=True, kw_only=True)
class ConversationSpec:
    """Who works, with which data, where files go: a conversation's or a tool session's.

    The face fills it from its own inputs; the core (`App`) opens the conversation
    or the workspace with it.
    """

    principal: str
    """Who asks, as the face authenticated them; it reaches every audit record."""
    team: str | None = None
    """The principal's team (the service's key or sign-in says which); audited beside it."""
    spend: SpendLimit | None = None
    """Budgets above each run (the key's, the team's), from the face's store; None: none."""
    withheld_tools: tuple[str, ...] = ()
    """Tools the policy enables that this principal's team is not offered (off at its gate)."""
    data: tuple[Path, ...] = ()
    """Files and directories mounted read-only at `/data/<name>`."""
    output: Path | None = None
    """One directory for every run's artifacts; default `<output_root>/<run_id>` per run."""
    output_root: Path = Path("sbx-output")
    """Where per-run artifact directories go when `output` is not given."""
    label: str | None = None
    """Shown first in the progress and kept in the transcript (the demo's "scripted model")."""
    conversation_id: str | None = None
    """The owner's id (a conversation's, an MCP session's, a program's run); None: a new one."""
    operator: Operator | None = None
    """Who answers the model's `ask_user` at once (the CLI's terminal prompt); None: no one."""
    defer_questions: bool = False
    """Without an operator, `ask_user` ends the run `needs_input` and `answer()` continues it;
    with neither, the model is not offered `ask_user`."""
    notes: NoteStore | None = None
    """Where notes about the data live (the CLI's file, the service's database); None: none."""
    one_shot: bool = False
    """One program (`App.execute`): stdout is what it wrote, no trailing value printed."""
    values_as_results: bool = False
    """A trailing value is a rich result only, never printed (a notebook's stdout, as E2B's
    SDK expects); False: printed too, where sbx's own model reads it."""


def check_data(data: Sequence[Path]) -> None:
    """Refuse data the sandbox's user could not read (`SettingsError`), before anything runs.

    Host-side tools must never read more than the sandbox can.
    """
    try:
        data_mounts(list(data))
    except InvalidInput as exc:
        raise SettingsError(str(exc)) from None


class Workspace(Closing):
    """A sandbox session kept across calls, and gates bound to it; thread-safe."""

    def __init__(
        self,
        *,
        spec: ConversationSpec,
        config: AppConfig,
        audit: AuditLog,
        pool: Pool | None,
        image: str,
        extra_tools: tuple[Tool, ...] = (),
        ready: RestoreReady | None = None,
    ) -> None:
        self.spec = spec
        self.owner_id = spec.conversation_id or "unnamed"
        """The conversation's, the tool session's or the program's id (audit, transcript)."""
        self.config = config
        self.audit = audit
        self.image = image
        self._pool = pool
        self._extra_tools = extra_tools
        self._ready = ready if ready is not None and ready.serves(image, config.limits) else None
        """The restore-ready containers, when this workspace's sandboxes can be one."""
        self._session: Session | None = None
        self._lock = threading.Lock()
        self._closed = False
        self.reset_pending = False
        """The sandbox was removed since it was last used: its variables are gone."""
        self.used = False
        """Code has run in the current sandbox (a reset then loses something)."""
        self._drop: DropDir | None = None
        self._lost = ""
        """Why the interpreter's state was last lost (restore tells the model); "" if kept."""
        self._cause: LossCause = "replaced"
        """The cause of that loss, from the one vocabulary (`sbx.agent.core.outcomes`)."""
        self._users = 0
        self.last_used = time.monotonic()
        """When the last run or call holding `in_use()` ended (monotonic seconds)."""
        self.held_cells: Callable[[], tuple[str, ...]] | None = None
        """The ids of the cells whose state the sandbox holds, by an owner that restores (a
        conversation): an idle release then takes a snapshot first."""
        self.snapshot: Snapshot | None = None
        """The last snapshot of the state (`sbx.agent.core.snapshot`), kept until replaced."""
        self._state: DropDir | None = None

    @property
    def enabled(self) -> bool:
        """Whether code may run at all (the policy enables `execute_python`)."""
        return self.config.policy.tools.execute_python.enabled and self._pool is not None

    def output_dir(self, run_id: str) -> Path:
        """Where the artifacts of `run_id` are copied."""
        return self.spec.output or self.spec.output_root / run_id

    def ticket(self, kind: RunKind, *, run_id: str | None = None, question: str = "",
               cancel: Cancellation | None = None, gate_id: str | None = None) -> RunTicket:
        """The ticket of a run in this workspace: every kind of run gets its ticket here.

        Who runs it and their team are the workspace's; a run whose id is the workspace's
        own (one program, a rerun) belongs to no conversation. Its artifacts go where its
        gate's do: the run's own gate, or `gate_id`'s (a tool session's, open for them all).
        """
        run_id = run_id or new_run_id()
        return RunTicket(run_id=run_id, kind=kind, principal=self.spec.principal,
                         team=self.spec.team, question=question,
                         conversation_id=None if run_id == self.owner_id else self.owner_id,
                         output_dir=self.output_dir(gate_id or run_id),
                         cancel=cancel or Cancellation())

    def open_gate(
        self, run_id: str, *, continues: str | None = None, on_output: OutputSink | None = None,
        output: Path | None = None,
    ) -> ToolGate:
        """A started gate for one run, its code sent to this workspace's sandbox.

        The sandbox is opened now if it is not open yet (None without
        `execute_python`); its artifacts for this run go to `output_dir(run_id)`.
        The gate may outlive a `discard()`: its next program opens a new
        sandbox. The caller closes the gate (`run_end`) when the run ends. `continues`
        names the run this one continues (after `needs_input`) in the audit's `run_start`;
        `on_output(call_id, stream, text)` receives executions' output while they run;
        `output` replaces `output_dir(run_id)` (a restore's replay writes apart, see `restore`).
        """
        opened = self._sandbox(run_id, output)
        context = ToolContext(
            run_id=run_id,
            runner=_CurrentSandbox(self, run_id, output) if opened is not None else None,
            data_paths=list(self._data()),
            data_drop=_QueryDrop(self) if self._drop is not None else None,
            principal=self.spec.principal,
            team=self.spec.team,
            conversation_id=self.owner_id,
            operator=self.spec.operator,
            defer_questions=self.spec.defer_questions,
            continues=continues,
            on_output=on_output,
            observation_chars=self.config.settings.observation_tokens * CHARS_PER_TOKEN,
            show_values=not self.spec.one_shot, print_values=not self.spec.values_as_results,
            notes=notes_for(self.spec, self.config.policy),
        )
        return build_gate(
            withhold(self.config.policy, self.spec.withheld_tools),
            limits=self.config.limits,
            context=context,
            audit=self.audit,
            extra_tools=self._extra_tools,
            max_argument_bytes=self.config.settings.max_argument_bytes,
        )

    def prepare(self, run_id: str) -> None:
        """Open the sandbox now, labelled with `run_id`, if it is not open (restore first)."""
        self._sandbox(run_id)

    def take_reset(self) -> bool:
        """Whether the sandbox was reset since the last look (and forget it)."""
        with self._lock:
            pending, self.reset_pending = self.reset_pending, False
            return pending

    def forget_loss(self) -> None:
        """A replaced sandbox lost nothing anyone must hear of: no reset note, no restore."""
        with self._lock:
            self.reset_pending, self._lost = False, ""

    def lost(self, reason: str, *, cause: LossCause = "replaced") -> None:
        """The interpreter lost its state (a timeout or OOM kill restarted it, a restart)."""
        with self._lock:
            self._lost, self._cause = reason, cause

    @property
    def lost_cause(self) -> LossCause:
        """The cause of the last loss (read before `lost_reason()` forgets it)."""
        return self._cause

    @property
    def state_lost(self) -> str:
        """Why the state was lost since the last `lost_reason()` ("" when it was not)."""
        return self._lost

    def lost_reason(self) -> str:
        """Why the state was lost, for the model's note (and forget it)."""
        with self._lock:
            reason, self._lost = self._lost, ""
        return reason or "the sandbox was removed"

    @contextmanager
    def in_use(self) -> Iterator[None]:
        """Held around a run or a call: the workspace is not idle meanwhile."""
        with self._lock:
            self._users += 1
        try:
            yield
        finally:
            with self._lock:
                self._users -= 1
                self.last_used = time.monotonic()

    @property
    def busy(self) -> bool:
        """A run or a call holds `in_use()` now."""
        return self._users > 0

    @property
    def holds_sandbox(self) -> bool:
        """A sandbox is open here (in use, or kept for the next call)."""
        return self._session is not None

    def idle_for(self, now: float | None = None) -> float | None:
        """Seconds since the last use ended; None while in use.

        Read without the lock, which a sandbox being opened holds while it waits
        for the host: housekeeping must never wait behind that.
        """
        return None if self._users else (now or time.monotonic()) - self.last_used

    def discard(self, *, reason: str = "the sandbox was removed",
                cause: LossCause = "replaced") -> None:
        """Remove the sandbox (any running code dies with it); the next use opens a new one."""
        with self._lock:
            session = self._take_session(reason, cause)
        if session is not None:
            session.close()

    def discard_if_idle(self, idle_s: float, *, now: float | None = None,
                        reason: str | None = None) -> bool:
        """Remove the sandbox if nobody has used it for `idle_s` s; whether it was removed.

        Checked and taken under the lock, so a run or call starting now finds no
        sandbox (and opens a fresh one) rather than losing it halfway. A lock held
        elsewhere means a use (a sandbox opening, maybe waiting for the host): not idle.
        """
        if not self._lock.acquire(blocking=False):
            return False
        try:
            idle = not self._users and (now or time.monotonic()) - self.last_used >= idle_s
            if idle and self._session is not None and self.used:
                self._take_snapshot(self._session)
            session = (self._take_session(reason or idle_reason(idle_s), "idle_release")
                       if idle else None)
        finally:
            self._lock.release()
        if session is None:
            return False
        session.close()
        return True

    def _take_session(self, reason: str, cause: LossCause) -> Session | None:
        """Under the lock: the open sandbox, no longer this workspace's; the reset noted."""
        session, self._session = self._session, None
        if session is not None and self.used:
            self.reset_pending = True
            self._lost, self._cause = reason, cause
        self.used = False
        return session

    def close(self) -> None:
        """Remove the sandbox for good (idempotent): a gate still held opens no new one."""
        with self._lock:
            self._closed = True
        try:
            self.discard()
        finally:
            for drop in (self._drop, self._state):
                if drop is not None:
                    drop.remove()
            self._drop = self._state = None
            self.snapshot = None
            if self._ready is not None:
                self._ready.back(self.owner_id)

    def forget_snapshot(self) -> None:
        """Drop the snapshot (the conversation was reset: nothing before it is restored)."""
        with self._lock:
            snapshot, self.snapshot = self.snapshot, None
        if snapshot is not None:
            snapshot.path.unlink(missing_ok=True)
        if self._ready is not None:
            self._ready.back(self.owner_id)

    def _take_snapshot(self, session: Session) -> None:
        """Under the lock, before an idle release: the state by value, or the reason logged."""
        settings = self.config.restore
        cells = self.held_cells() if self.held_cells is not None else ()
        if not (settings.enabled and settings.snapshot_bytes and cells and self._pool):
            return
        if self._state is None:
            self._state = DropDir.create(self._pool.data_root, STATE_DIR)
        ready = self._ready
        try:
            taken = take(session, self._state.path, principal=self.spec.principal, cells=cells,
                         limit=min(settings.snapshot_bytes, self.config.limits.max_artifact_bytes),
                         modules=ready.key.also_import if ready is not None else ())
        except SandboxError as exc:
            taken = str(exc)
        if isinstance(taken, str):  # an earlier snapshot, if any, still holds its cells
            logger.info("no snapshot of %s: %s", self.owner_id, taken)
            return
        self.snapshot = taken
        if ready is not None and ready.wanted(taken.loaded):
            ready.released(self.owner_id)

    def _data(self) -> tuple[Path, ...]:
        """The data paths of every sandbox: the caller's, then the query drop (if any)."""
        drop = self._drop
        return (*self.spec.data, drop.path) if drop is not None else self.spec.data

    def _wants_drop(self) -> bool:
        """Whether `query_sql` is offered here: enabled, with a source for the principal."""
        rule = self.config.policy.tools.query_sql
        return rule.enabled and bool(rule.sources_for(self.spec.principal))

    def _sandbox(self, run_id: str, output: Path | None = None) -> Session | None:
        """The workspace's session, opened at first use, its output set for `run_id`."""
        if not self.enabled or self._pool is None:
            return None
        with self._lock:
            if self._closed:
                raise WorkspaceClosed(f"the workspace of {self.owner_id} is closed")
            if self._session is None:
                if self._drop is None and self._wants_drop():
                    self._drop = DropDir.create(self._pool.data_root, QUERY_DIR)
                ready = self._ready
                wants = (ready is not None and self.snapshot is not None
                         and ready.wanted(self.snapshot.loaded))
                try:
                    self._session = self._pool.session(
                        SessionSpec(
                            limits=self.config.limits,
                            image=self.image,
                            data=(*self._data(), *([self._state.path] if self._state else [])),
                            output_dir=output or self.output_dir(run_id),
                            run_id=run_id,
                            also_import=ready.key.also_import if ready and wants else (),
                        )
                    )
                finally:  # after the take: the count must not drop while it waits
                    if ready is not None and wants:
                        ready.back(self.owner_id)
            self._session.output_dir = output or self.output_dir(run_id)
            self.used = True
            return self._session


class _QueryDrop:
    """The workspace's query drop as the tools see it (`DataDrop`): `/data/queries/NAME`."""

    def __init__(self, workspace: Workspace) -> None:
        self._workspace = workspace

    def put(self, name: str, data: bytes) -> str:
        """Write the file, show it in the sandbox running now, return its sandbox path."""
        workspace = self._workspace
        drop = workspace._drop
        if drop is None:
            raise WorkspaceClosed(f"the workspace of {workspace.owner_id} is closed")
        path = drop.put(name, data)
        with workspace._lock:
            session = workspace._session
        if session is not None:
            session.show_file(path)
        return f"/data/{QUERY_DIR}/{name}"


class _CurrentSandbox:
    """The workspace's sandbox as the gate's runner, re-resolved at every run.

    A gate kept across `discard()` (an MCP session's, for its whole life)
    must send its next program to the new sandbox, not to the removed one,
    and a session removed while it ran must not come back behind the
    workspace's back (`Session.run` restarts a closed session).
    """

    def __init__(self, workspace: Workspace, run_id: str, output: Path | None) -> None:
        self._workspace = workspace
        self._run_id = run_id
        self._output = output

    def run(
        self,
        code: str,
        *,
        on_output: OutputCallback | None = None,
        timeout: float | None = None,
        show_values: bool = True,
        print_values: bool = True,
    ) -> ExecutionResult:
        """Run `code` in the workspace's current sandbox (opened again after a discard)."""
        session = self._workspace._sandbox(self._run_id, self._output)
        if session is None:
            raise SandboxError("no sandbox is available in this workspace")
        try:
            result = session.run(
                code, on_output=on_output, timeout=timeout, show_values=show_values,
                print_values=print_values,
            )
        finally:
            with self._workspace._lock:
                current = self._workspace._session is session
            if not current:  # discarded while it ran: remove whatever it restarted
                session.close()
        if result.state_reset and current:  # else the discard (a cancel...) named the cause
            cause = execution_loss({"timed_out": result.timed_out,
                                    "oom_killed": result.oom_killed})
            self._workspace.lost(loss_text(cause), cause=cause)
        return result

