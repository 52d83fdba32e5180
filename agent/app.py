"""Wiring for `sbx ask` and `sbx demo`: policy, audit log, transcript, sandbox, gate, model, loop.

This is CLI wiring, the one place in `agent/` besides the commands that
imports `sandbox` (DESIGN: the loop never does). It opens everything a run
needs, runs the loop, and closes everything in reverse order whatever
happens, Ctrl-C included: the session (its container is killed and removed),
then the gate (the audit log's `run_end` record, with the run's status), then
the audit log and the transcript.

    policy ──▶ settings + endpoint ──▶ ModelClient
       │
       ├──▶ AuditLog ──┐
       ├──▶ Session ───┼──▶ ToolGate ──▶ agent.loop.run ──▶ RunResult
       └──▶ data ──────┴──▶ system prompt
"""

from __future__ import annotations

from collections.abc import Mapping
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sbx.agent.loop import run
from sbx.agent.model import ModelClient
from sbx.agent.prompt import build_system_prompt
from sbx.agent.settings import AgentSettings, Endpoint, resolve_endpoint, resolve_settings
from sbx.agent.state import RunResult
from sbx.agent.transcript import Event, EventSink, Transcript, fanout
from sbx.sandbox.config import DEFAULT_IMAGE
from sbx.sandbox.errors import SandboxError
from sbx.sandbox.pool import Pool
from sbx.sandbox.pool_config import PoolConfig
from sbx.sandbox.session import Session, new_run_id
from sbx.sandbox.units import format_size
from sbx.tools.audit import AuditError, AuditLog, open_audit_log
from sbx.tools.context import ToolContext
from sbx.tools.gate import ToolGate, build_gate
from sbx.tools.policy import Policy, PolicyError, load_policy

RUNS_DIR = Path("sbx-runs")
OUTPUT_DIR = Path("sbx-output")


@dataclass(frozen=True, kw_only=True)
class AskOptions:
    """What `sbx ask` was given; None means "not given" (the policy or a default decides)."""

    question: str
    """The user's question, sent as the first user message."""
    data: tuple[Path, ...] = ()
    """Files and directories mounted read-only at `/data/<name>`."""
    output: Path | None = None
    """Where artifacts are copied; default `sbx-output/<run_id>`."""
    policy: Path | None = None
    """The policy file; default the packaged `tools/sbx.toml`."""
    audit_log: Path | None = None
    """The audit log (`--audit-log` > `SBX_AUDIT_LOG` > policy > `./sbx-audit.jsonl`)."""
    transcript: Path | None = None
    """The transcript; default `sbx-runs/<run_id>.jsonl`."""
    image: str = DEFAULT_IMAGE
    """The sandbox image."""
    base_url: str | None = None
    """`--base-url`."""
    api_key: str | None = None
    """`--api-key`."""
    model: str | None = None
    """`--model`."""
    flags: Mapping[str, Any] = field(default_factory=dict)
    """Budget and tuning flags (`max_turns`, `request_timeout`, ...); None values are ignored."""
    label: str | None = None
    """Shown first in the progress and kept in the transcript (the demo's "scripted model")."""


@dataclass(frozen=True, kw_only=True)
class AskOutcome:
    """A finished run and where its records are."""

    result: RunResult
    """How the run ended, the answer, totals."""
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
            "transcript": str(self.transcript),
            "audit_log": str(self.audit_log),
            "output_dir": str(self.output_dir),
        }


@dataclass(frozen=True, kw_only=True)
class _Run:
    """What one run was opened with."""

    options: AskOptions
    policy: Policy
    settings: AgentSettings
    endpoint: Endpoint
    run_id: str
    output_dir: Path


def ask(
    options: AskOptions, *, environ: Mapping[str, str], progress: EventSink | None = None
) -> AskOutcome:
    """Run one question end to end; raise for operator errors (policy, settings, engine, audit)."""
    policy = load_policy(options.policy)
    settings = resolve_settings(policy.agent, options.flags)
    endpoint = resolve_endpoint(
        settings,
        base_url=options.base_url,
        api_key=options.api_key,
        model=options.model,
        environ=environ,
    )
    run_id = new_run_id()
    spec = _Run(
        options=options,
        policy=policy,
        settings=settings,
        endpoint=endpoint,
        run_id=run_id,
        output_dir=options.output or OUTPUT_DIR / run_id,
    )
    transcript_path = options.transcript or RUNS_DIR / f"{run_id}.jsonl"
    audit = open_audit_log(
        policy.audit, option=options.audit_log, api_key=endpoint.api_key, environ=environ
    )
    with audit, Transcript.create(transcript_path, run_id=run_id) as transcript:
        emit = fanout(transcript.record, progress) if progress else transcript.record
        try:
            result = _run_with_sandbox(spec, audit, emit)
        except KeyboardInterrupt:  # outside the loop, which records its own cancellation
            emit({"type": "run_error", "error": "cancelled while the run was starting or ending"})
            raise
        except (SandboxError, AuditError, PolicyError) as exc:
            emit({"type": "run_error", "error": f"{type(exc).__name__}: {exc}"})
            raise
    return AskOutcome(
        result=result,
        transcript=transcript_path,
        audit_log=audit.path,
        output_dir=spec.output_dir,
    )


def _run_with_sandbox(spec: _Run, audit: AuditLog, emit: EventSink) -> RunResult:
    """Open the session (if `execute_python` is enabled) and the gate, run, close both.

    The session comes from a pool with no warm containers: one `ask` is one
    run, so there is nothing to pre-warm, but the pool holds the host-wide
    lease (SBX_MAX_SANDBOXES and friends) and removes the container off the
    answer's path. `Session.close` is safe while a tool thread still reads
    (Ctrl-C): it removes the container first, which ends that read.
    """
    gate: ToolGate | None = None
    reason = "error"
    with ExitStack() as stack:
        try:
            session: Session | None = None
            if spec.policy.tools.execute_python.enabled:
                pool = stack.enter_context(Pool.start(config=PoolConfig(size=0)))
                session = stack.enter_context(
                    pool.session(
                        limits=spec.policy.sandbox,
                        image=spec.options.image,
                        data=list(spec.options.data),
                        output_dir=spec.output_dir,
                        run_id=spec.run_id,
                    )
                )
            context = ToolContext(
                run_id=spec.run_id,
                runner=session,
                data_paths=list(spec.options.data),
                api_key=spec.endpoint.api_key,
            )
            gate = build_gate(
                spec.policy, context=context, audit=audit,
                max_argument_bytes=spec.settings.max_argument_bytes,
            )
            result = _run_loop(spec, gate, emit)
            reason = result.status
            return result
        except KeyboardInterrupt:
            reason = "cancelled"
            raise
        finally:
            if session is not None:
                session.close()
            if gate is not None:
                gate.close(reason=reason)


def _run_loop(spec: _Run, gate: ToolGate, emit: EventSink) -> RunResult:
    """Build the system prompt, announce the run, and hand over to the loop."""
    limits = spec.policy.sandbox
    prompt = build_system_prompt(
        data=spec.options.data,
        tools=gate.enabled_names(),
        timeout_s=limits.timeout,
        memory=format_size(limits.memory),
    )
    with ModelClient.connect(spec.endpoint, spec.settings) as model:
        emit(_run_start(spec, model, prompt.version, gate.enabled_names()))
        return run(
            spec.options.question,
            model=model,
            gate=gate,
            settings=spec.settings,
            system_prompt=prompt.text,
            emit=emit,
        )


def _run_start(spec: _Run, model: ModelClient, prompt_version: str, tools: list[str]) -> Event:
    """The transcript's first event: what this run is and what it may spend."""
    return {
        "type": "run_start",
        "run_id": spec.run_id,
        "label": spec.options.label,
        "question": spec.options.question,
        "model": model.model,
        "base_url": model.base_url,
        "prompt_version": prompt_version,
        "policy_sha256": spec.policy.digest(),
        "tools": tools,
        "budget": spec.settings.budget.model_dump(),
        "settings": spec.settings.model_dump(exclude={"budget"}),
        "data": [str(path) for path in spec.options.data],
        "output_dir": str(spec.output_dir),
        "image": spec.options.image,
    }
