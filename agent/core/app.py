"""The application core's front door: configuration once, one pool and one audit log.

Every face of sbx (the CLI, the service and its web page, MCP) calls this
layer and none re-implements a run. It holds no click and writes to no
terminal: faces render the events they subscribe to. The door's operations:

    App.open(config)                        the audit log; the pool when code may run
    App.conversation(spec, endpoint)        open a conversation (its sandbox at first use)
    App.reopen(spec, endpoint, transcript)  resume one from its transcript (`sbx ask --continue`)
      └─ Conversation.ask / answer / cancel  a run each (a `Cancellation` token, a recorder)
    App.workspace(spec, extra_tools)        tools without a model (an MCP session, a rerun)
    execute_program(app, spec)              one program, gated and audited like a model's call
                                            (`sbx.agent.core.execute_program`)

Every per-run choice of limits goes through `limits=` (already checked below the
policy's ceiling by the caller's request type). The audit log, the pool and the
image stay in here: faces never pass them on, and never build a `Workspace` or
a `Conversation` themselves (tests/test_layering.py).

`App` is one of the two places in `agent/` that imports `sandbox` (with the
conversation); the loop never does (DESIGN). Closing the app drains the pool
(every container removed) and closes the audit log.
"""

from __future__ import annotations

import getpass
import os
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from sbx.agent.core.config import AppConfig, PoolSettings
from sbx.agent.core.conversation import Conversation, ConversationSpec, new_conversation_id
from sbx.agent.core.events import ConversationStart, EventSink
from sbx.agent.core.limits_request import LimitsRequest
from sbx.agent.core.settings import Endpoint, SettingsError
from sbx.agent.core.state import RunResult
from sbx.agent.core.transcript import Transcript
from sbx.agent.core.workspace import Workspace, check_data
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
from sbx.tools.registry import Tool

RUNS_DIR = Path("sbx-runs")
"""Default directory of transcripts (`<conversation or run id>.jsonl`)."""
OUTPUT_DIR = Path("sbx-output")
"""Default root of artifact directories (`<run_id>/`)."""


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

    def reopen(self, spec: ConversationSpec, *, endpoint: Endpoint, transcript: Path,
               next_seq: int, limits: LimitsRequest | None = None) -> Conversation:
        """A conversation taken up from its transcript (appended from line `next_seq` on)."""
        check_data(spec.data)
        if spec.conversation_id is None:
            raise SettingsError("a conversation is reopened under its own id")
        limited = self.config.limited(limits or LimitsRequest()).limits
        record = Transcript.reopen(transcript, conversation_id=spec.conversation_id,
                                   next_seq=next_seq)
        try:
            return self._conversation(spec, endpoint, record, limited)
        except BaseException:
            record.close()
            raise

    def workspace(self, spec: ConversationSpec, *, extra_tools: tuple[Tool, ...] = (),
                  limits: LimitsRequest | None = None) -> Workspace:
        """A sandbox kept across tool calls without a model (an MCP session's, a program's).

        `limits` tighten the policy's (`LimitRefused` above its ceiling). Unreadable data
        is the sandbox's `InvalidInput` when it opens (the faces that prefer a
        `SettingsError` up front call `check_data`).
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
            pool=self.pool, image=self.image,
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


def answer_one(
    app: App,
    question: str,
    *,
    spec: ConversationSpec,
    endpoint: Endpoint,
    transcript: Path | None = None,
    progress: EventSink | None = None,
) -> Answer:
    """One question in a conversation of its own: the shape of `sbx ask`.

    The transcript is named after the run (`sbx-runs/<run_id>.jsonl`) unless
    given; the sandbox is removed before this returns.
    """
    run_id = new_run_id()
    path = transcript or RUNS_DIR / f"{run_id}.jsonl"
    with app.conversation(spec, endpoint=endpoint, transcript=path) as conversation:
        if progress is not None:
            conversation.subscribe(progress)
        result = conversation.ask(question, run_id=run_id)
    output = spec.output or spec.output_root / run_id
    return Answer(
        result=result, conversation_id=conversation.id, transcript=path,
        audit_log=app.audit_path, output_dir=output,
    )
