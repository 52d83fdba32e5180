"""The application core's front door: configuration once, one pool and one audit log.

Every face of sbx (the CLI, the service and its web page, MCP, E2B) calls this
layer and none re-implements a run. It holds no click and writes to no
terminal: faces render the events they subscribe to. Every way a run starts
is a method here or on the conversation it opens:

    App.open(config)                          the audit log; the pool when code may run
    App.conversation(spec, endpoint)          open a conversation (its sandbox at first use)
      └─ Conversation.admit / ask / answer    a question, or the answer to a pending one: a run
         Conversation.cancel                  each (its `Cancellation` token, a recorder)
    App.resume(record, spec, endpoint)        a recorded conversation taken up (`sbx chat
                                              --resume`, a restarted server, an adopting replica)
    App.continue_paused(paused, answer, ...)  a recorded run that ended `needs_input`, answered
    App.answer_one(question, spec, endpoint)  one question in a conversation of its own
    App.execute(program)                      one program, gated and audited like a model's call
    App.tool_session(spec, build=...)         a tool session for an agent that brings its model
                                              (MCP, E2B): each execution a run
    App.rerun(record, principal=...)          a recorded conversation's code run again, compared

Each run has one ticket (`Workspace.ticket`) and one life told to the face's
`RunRecorder` (`sbx.agent.core.run_recorder.recorded`): admitted, started,
finished or withdrawn. Every per-run choice of limits comes in as a
`LimitsRequest` (checked below the policy's ceiling by `AppConfig.limited`).
The audit log, the pool and the image stay in here: faces never pass them on,
and never build a `Workspace`, a gate or a `Conversation` themselves
(tests/test_layering.py).

`App` is one of the two places in `agent/` that imports `sandbox` (with the
conversation); the loop never does. Closing the app drains the pool (every
container removed) and closes the audit log.
"""

from __future__ import annotations

import getpass
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, TypeVar

from sbx.agent.core.config import AppConfig, PoolSettings
from sbx.agent.core.conversation import Conversation, ConversationSpec, new_conversation_id
from sbx.agent.core.events import ConversationStart, EventSink
from sbx.agent.core.execute_program import ProgramRun, ProgramSpec, run_program
from sbx.agent.core.history import RecordedConversation
from sbx.agent.core.limits_request import LimitsRequest
from sbx.agent.core.rerun import ExecutionCheck, RerunReport, rerun_in, rerun_plan
from sbx.agent.core.restore_ready import RestoreReady
from sbx.agent.core.resume import Resumable
from sbx.agent.core.run_recorder import NoRecorder, RunRecorder
from sbx.agent.core.settings import Endpoint
from sbx.agent.core.state import RunResult
from sbx.agent.core.tool_session import ToolSession
from sbx.agent.core.transcript import Transcript
from sbx.agent.core.workspace import Workspace, check_data
from sbx.agent.model.cancellation import Cancellation
from sbx.agent.model.client import ModelClient
from sbx.sandbox.closing import Closing
from sbx.sandbox.config import DEFAULT_IMAGE as DEFAULT_IMAGE
from sbx.sandbox.engine import Engine
from sbx.sandbox.errors import SandboxError
from sbx.sandbox.gc import owner_alive as owner_alive
from sbx.sandbox.limits import Limits
from sbx.sandbox.pool import Pool
from sbx.sandbox.pool_config import PoolConfig, PoolKey
from sbx.sandbox.session import new_run_id
from sbx.tools.audit import AuditLog, open_audit_log
from sbx.tools.context import OutputSink
from sbx.tools.gate import ToolGate
from sbx.tools.registry import Tool

RUNS_DIR = Path("sbx-runs")
"""Default directory of transcripts (`<conversation or run id>.jsonl`)."""
OUTPUT_DIR = Path("sbx-output")
"""Default root of artifact directories (`<run_id>/`)."""

S = TypeVar("S", bound=ToolSession)
"""A face's own kind of tool session, built by `App.tool_session` (MCP's, E2B's)."""


def os_principal() -> str:
    """The principal of a local face (CLI, stdio MCP): the operating-system user."""
    try:
        return f"os:{getpass.getuser()}"
    except (KeyError, OSError):
        return f"os:uid-{os.getuid()}"


def require_image(image: str) -> None:
    """Refuse an image that is not built (`SandboxError`; sbx never pulls), before serving.

    A face that serves clients (`sbx mcp`) fails at its start, not at a client's first call.
    """
    Engine.connect(timeout=10).require_image(image)


class App(Closing):
    """One configuration, one pool, one audit log; conversations for any face."""

    def __init__(
        self, *, config: AppConfig, audit: AuditLog, pool: Pool | None, image: str
    ) -> None:
        self.config = config
        self.audit = audit
        self.pool = pool
        self.image = image
        self.warm_key = PoolKey(image=image, limits=config.limits)
        """The containers the pool keeps warm: the policy's own limits (`[pool]`)."""
        restore = config.restore
        self.restore_ready = RestoreReady(
            pool, image=image, limits=config.limits, modules=restore.preimport,
            most=restore.ready if restore.enabled and restore.snapshot_bytes else 0)
        """The restore-ready containers kept for released conversations (`[restore] ready`)."""

    @classmethod
    def open(
        cls,
        config: AppConfig,
        *,
        environ: Mapping[str, str],
        audit_log: Path | None = None,
        secrets: tuple[str, ...] = (),
        image: str = DEFAULT_IMAGE,
        pool_config: PoolConfig | None = None,
    ) -> App:
        """Open the audit log, then the pool when the policy lets code run at all.

        `[pool]` sizes the pool unless a face passes `pool_config` (the benchmarks);
        when it keeps any warm, the policy's limits are warmed (`warm_key`).
        `secrets` (API keys) are redacted wherever they would reach the audit log.
        """
        audit = open_audit_log(
            config.policy.audit, option=audit_log, api_key=secrets[0] if secrets else None,
            environ=environ,
        )
        pool: Pool | None = None
        try:
            if config.policy.tools.execute_python.enabled:
                pool = Pool.start(config=pool_config or _pool_config(config.pool))
        except BaseException:
            audit.close()
            raise
        app = cls(config=config, audit=audit, pool=pool, image=image)
        if pool is not None and pool_config is None and config.pool.keeps_warm:
            try:
                pool.warm(app.warm_key)
            except BaseException:
                app.close()
                raise
        return app

    def conversation(
        self,
        spec: ConversationSpec,
        *,
        endpoint: Endpoint,
        transcript: Path | None = None,
        limits: LimitsRequest | None = None,
    ) -> Conversation:
        """Open a conversation: its transcript, its model client; its sandbox at first use.

        Data the sandbox's user could not read is a `SettingsError` now, before
        anything runs (host-side tools must never read more than the sandbox can).
        `limits` tighten the policy's for its sandbox (`LimitRefused` above its ceiling).
        """
        check_data(spec.data)
        limited = self.config.limited(limits or LimitsRequest()).limits
        conversation_id = spec.conversation_id or new_conversation_id()
        spec = replace(spec, conversation_id=conversation_id)
        path = transcript or RUNS_DIR / f"{conversation_id}.jsonl"
        record = Transcript.create(path, conversation_id=conversation_id)
        conversation = self._conversation(spec, endpoint, record, limited)
        conversation.emit(
            ConversationStart(
                conversation_id=conversation_id, principal=spec.principal,
                data=[str(path) for path in spec.data], label=spec.label,
            )
        )
        return conversation

    def resume(self, record: Resumable, *, spec: ConversationSpec, endpoint: Endpoint,
               data: tuple[Path, ...] | None = None, limits: LimitsRequest | None = None,
               lost_reason: str | None = None) -> Conversation:
        """Take up the recorded conversation `record`: its id, data, messages and question.

        Its events are appended to the same transcript; its first run restores the
        sandbox's state (the sandbox died with the process that held it). `spec` gives
        the face's principal, output and operator; `data` replaces the recorded paths (a
        replica has its own copy of the datasets); `lost_reason` says why its sandbox is
        gone (a restart's words: which process ended, which replica drained).
        """
        spec = replace(spec, conversation_id=record.conversation_id,
                       data=record.data if data is None else data)
        check_data(spec.data)
        limited = self.config.limited(limits or LimitsRequest()).limits
        transcript = Transcript.reopen(record.path, conversation_id=record.conversation_id,
                                       next_seq=record.next_seq)
        try:
            conversation = self._conversation(spec, endpoint, transcript, limited)
        except BaseException:
            transcript.close()
            raise
        conversation.restore(record.messages, record.pending, lost=record.executions > 0,
                             reason=lost_reason)
        return conversation

    def continue_paused(self, paused: Resumable, answer: str, *, spec: ConversationSpec,
                        endpoint: Endpoint, progress: EventSink | None = None,
                        limits: LimitsRequest | None = None) -> Answer:
        """Answer a recorded run that ended `needs_input` (`sbx ask --continue`): a new run.

        It runs in a new sandbox and is appended to the paused run's transcript
        (`read_paused` checks that the run is the last and waits for an answer).
        """
        with self.resume(paused, spec=spec, endpoint=endpoint, limits=limits) as conversation:
            if progress is not None:
                conversation.subscribe(progress)
            result = conversation.answer(answer)
        output = spec.output or spec.output_root / result.run_id
        return Answer(result=result, conversation_id=conversation.id, transcript=paused.path,
                      audit_log=self.audit_path, output_dir=output)

    def answer_one(self, question: str, *, spec: ConversationSpec, endpoint: Endpoint,
                   transcript: Path | None = None, progress: EventSink | None = None,
                   limits: LimitsRequest | None = None) -> Answer:
        """One question in a conversation of its own: the shape of `sbx ask`.

        The transcript is named after the run (`sbx-runs/<run_id>.jsonl`) unless
        given; the sandbox is removed before this returns.
        """
        run_id = new_run_id()
        path = transcript or RUNS_DIR / f"{run_id}.jsonl"
        with self.conversation(spec, endpoint=endpoint, transcript=path,
                               limits=limits) as conversation:
            if progress is not None:
                conversation.subscribe(progress)
            result = conversation.ask(question, run_id=run_id)
        output = spec.output or spec.output_root / run_id
        return Answer(result=result, conversation_id=conversation.id, transcript=path,
                      audit_log=self.audit_path, output_dir=output)

    def execute(self, program: ProgramSpec, *, on_output: OutputSink | None = None,
                watch: Callable[[ToolGate], None] | None = None,
                recorder: RunRecorder | None = None,
                cancel: Cancellation | None = None) -> ProgramRun:
        """Run one program through the gate in a sandbox of its own, then remove the sandbox.

        Raises `LimitRefused` for limits above the policy (nothing runs, nothing is
        audited) and `SandboxError` when sbx itself could not run it (engine, image,
        runtime, data, host capacity). `on_output(call_id, stream, text)` gets the
        output while the code runs; `watch` gets the gate as soon as it is open.
        `recorder` hears the run's life; `cancel` stops the call (fired before the
        gate opens, the code never runs).
        """
        run_id = program.run_id or new_run_id()
        spec = ConversationSpec(conversation_id=run_id, principal=program.principal,
                                team=program.team, data=program.data,
                                output=program.output or OUTPUT_DIR / run_id,
                                one_shot=True)  # stdout exactly the program's
        return run_program(self._workspace(spec, limits=program.limits), program,
                           on_output=on_output, watch=watch, recorder=recorder, cancel=cancel)

    def tool_session(self, spec: ConversationSpec, *, build: Callable[[Workspace], S],
                     extra_tools: tuple[Tool, ...] = (),
                     limits: LimitsRequest | None = None) -> S:
        """A tool session for an agent that brings its own model (an MCP client, E2B's SDK).

        Its workspace (`spec`'s id is the session's) is opened here, with `extra_tools`
        beside the policy's and `limits` tightening its sandbox's (`LimitRefused` above the
        ceiling); `build(workspace)` makes the face's session of it (a `ToolSession`, or
        the face's own kind of one). Each of its executions is a run of its recorder.
        """
        workspace = self._workspace(spec, extra_tools=extra_tools, limits=limits)
        try:
            return build(workspace)
        except BaseException:
            workspace.close()
            raise

    def rerun(self, record: RecordedConversation, *, principal: str, output_dir: Path,
              on_check: Callable[[ExecutionCheck], None] = lambda check: None,
              recorder: RunRecorder | None = None,
              limits: LimitsRequest | None = None) -> RerunReport:
        """Run a recorded conversation's code again in a fresh sandbox; compare each output.

        The recorded data still present is mounted (what changed is in the report);
        `on_check` hears each execution as it is compared. `RerunError` when the policy
        lets no code run.
        """
        report, data = rerun_plan(record)
        workspace = self._workspace(ConversationSpec(
            conversation_id=report.rerun_id, principal=principal, data=data, output=output_dir),
            limits=limits)
        return rerun_in(workspace, record, report, recorder=recorder or NoRecorder(),
                        on_check=on_check)

    def _workspace(self, spec: ConversationSpec, *, extra_tools: tuple[Tool, ...] = (),
                   limits: LimitsRequest | None = None) -> Workspace:
        """The one place a `Workspace` without a conversation is built: tools, no model.

        `limits` tighten the policy's (`LimitRefused` above its ceiling). Unreadable data
        is the sandbox's `InvalidInput` when it opens.
        """
        config = self.config.limited(limits or LimitsRequest())
        return Workspace(spec=spec, config=config, audit=self.audit,
                         pool=self.pool, image=self.image, extra_tools=extra_tools)

    @property
    def audit_path(self) -> Path:
        """Where the audit log is (faces print it; only the core writes it)."""
        return self.audit.path

    def require_image(self) -> None:
        """Raise (`SandboxError`) unless the engine answers and has the image, when code runs."""
        if self.pool is not None:
            self.pool.engine.require_image(self.image)

    def readiness(self) -> str:
        """The engine and the image, as `/readyz` reports them: `ok...`, or why not."""
        if self.pool is None:
            return "ok (execute_python disabled)"
        try:
            self.require_image()
        except SandboxError as exc:
            return f"failed: {type(exc).__name__}"
        return "ok"

    def sandbox_figures(self) -> dict[str, int]:
        """The pool's containers by state, its target and its hits and misses (metrics)."""
        if self.pool is None:
            return {}
        stats = self.pool.snapshot()
        return {"idle": stats.idle, "building": stats.building,
                "removing": self.pool.reaper.pending(), "target": stats.target,
                "hits": stats.hits, "misses": stats.misses}

    def expect_sessions(self, count: int) -> None:
        """Tell the pool `count` sandboxes will be asked for soon (demand sizing).

        `sbx serve` passes its open conversations that hold no sandbox; the pool
        warms for them when `[pool] max_size` allows.
        """
        if self.pool is not None:
            self.pool.expect(self.warm_key, count)

    def host_demand(self) -> tuple[int, int] | None:
        """Callers waiting for the host's sandbox cap now, and the cap (None without a pool)."""
        if self.pool is None:
            return None
        return self.pool.capacity.waiting(), self.pool.capacity.caps.sandboxes

    @property
    def runs_code(self) -> bool:
        """Whether programs can run at all (the policy enables `execute_python`)."""
        return self.pool is not None

    def _config_for(self, limits: Limits | None) -> AppConfig:
        return self.config if limits is None else replace(self.config, limits=limits)

    def _conversation(self, spec: ConversationSpec, endpoint: Endpoint, record: Transcript,
                      limits: Limits | None) -> Conversation:
        """The one place a `Conversation` is built: its model client, its sandbox's config."""
        config = self._config_for(limits)
        model = ModelClient.connect(endpoint, config.settings)
        return Conversation(
            spec=spec, config=config, model=model, audit=self.audit, transcript=record,
            pool=self.pool, image=self.image, ready=self.restore_ready,
        )

    def close(self) -> None:
        """Drain the pool (every container removed), then close the audit log."""
        pool, self.pool = self.pool, None
        try:
            if pool is not None:
                pool.close()
        finally:
            self.audit.close()


def _pool_config(settings: PoolSettings) -> PoolConfig:
    """The sandbox layer's configuration for the operator's `[pool]` knobs."""
    return PoolConfig(size=settings.size, max_size=settings.max_size, window_s=settings.window,
                      memory_budget=settings.memory_budget, refill_delay_s=settings.refill_delay)


@dataclass(frozen=True, kw_only=True)
class Answer:
    """A finished one-question run and where its records are (`sbx ask`, `sbx demo`)."""

    result: RunResult
    """How the run ended, the answer, totals."""
    conversation_id: str
    """The conversation the run belonged to."""
    transcript: Path
    """The JSON Lines transcript."""
    audit_log: Path
    """The audit log the run's tool calls were appended to."""
    output_dir: Path
    """Where artifacts were copied."""

    def as_dict(self) -> dict[str, Any]:
        """The `--json` document."""
        return {
            **self.result.as_dict(),
            "conversation_id": self.conversation_id,
            "transcript": str(self.transcript),
            "audit_log": str(self.audit_log),
            "output_dir": str(self.output_dir),
        }

