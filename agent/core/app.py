"""The application core: configuration once, one pool and one audit log, conversations for all.

Every face of sbx (the CLI today; the service, MCP and the web page next)
calls this layer and none re-implements a run. It holds no click and writes
to no terminal: faces render the events they subscribe to.

    AppConfig (agent.config) ──▶ App.open ──▶ Pool (host-wide cap, warm containers)
                                    │      └─▶ AuditLog (one, shared, hash-chained)
                                    └──▶ App.conversation(spec, endpoint) ──▶ Conversation
                                                     └── ask(question) ──▶ RunResult, events

`App` is one of the two places in `agent/` that imports `sandbox` (with the
conversation); the loop never does (DESIGN). Closing the app drains the pool
(every container removed) and closes the audit log.
"""

from __future__ import annotations

import getpass
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sbx.agent.core.config import AppConfig
from sbx.agent.core.conversation import Conversation, ConversationSpec, new_conversation_id
from sbx.agent.core.events import ConversationStart, EventSink
from sbx.agent.core.settings import Endpoint, SettingsError
from sbx.agent.core.state import RunResult
from sbx.agent.core.transcript import Transcript
from sbx.agent.model.client import ModelClient
from sbx.sandbox.closing import Closing
from sbx.sandbox.config import DEFAULT_IMAGE as DEFAULT_IMAGE  # faces name the image by it
from sbx.sandbox.engine import Engine
from sbx.sandbox.errors import InvalidInput
from sbx.sandbox.files import data_mounts
from sbx.sandbox.pool import Pool
from sbx.sandbox.pool_config import PoolConfig
from sbx.sandbox.session import new_run_id
from sbx.tools.audit import AuditLog, open_audit_log

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

        `secrets` (API keys) are redacted wherever they would reach the audit log.
        """
        audit = open_audit_log(
            config.policy.audit, option=audit_log, api_key=secrets[0] if secrets else None,
            environ=environ,
        )
        pool: Pool | None = None
        try:
            if config.policy.tools.execute_python.enabled:
                pool = Pool.start(config=pool_config or PoolConfig(size=0))
        except BaseException:
            audit.close()
            raise
        return cls(config=config, audit=audit, pool=pool, image=image)

    def conversation(
        self,
        spec: ConversationSpec,
        *,
        endpoint: Endpoint,
        transcript: Path | None = None,
    ) -> Conversation:
        """Open a conversation: its transcript, its model client; its sandbox at first use.

        Data the sandbox's user could not read is a `SettingsError` now, before
        anything runs (host-side tools must never read more than the sandbox can).
        """
        try:
            data_mounts(list(spec.data))
        except InvalidInput as exc:
            raise SettingsError(str(exc)) from None
        conversation_id = spec.conversation_id or new_conversation_id()
        spec = ConversationSpec(**{**vars(spec), "conversation_id": conversation_id})
        path = transcript or RUNS_DIR / f"{conversation_id}.jsonl"
        record = Transcript.create(path, conversation_id=conversation_id)
        model = ModelClient.connect(endpoint, self.config.settings)
        conversation = Conversation(
            spec=spec, config=self.config, model=model, audit=self.audit, transcript=record,
            pool=self.pool, image=self.image,
        )
        conversation.emit(
            ConversationStart(
                conversation_id=conversation_id, principal=spec.principal,
                data=[str(path) for path in spec.data], label=spec.label,
            )
        )
        return conversation

    def close(self) -> None:
        """Drain the pool (every container removed), then close the audit log."""
        pool, self.pool = self.pool, None
        try:
            if pool is not None:
                pool.close()
        finally:
            self.audit.close()


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
        audit_log=app.audit.path, output_dir=output,
    )
