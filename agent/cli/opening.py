"""What `sbx ask`, `sbx demo` and `sbx chat` share: their flags, and opening the core from them.

The flags map onto the application core (`sbx.agent.core.app`) one to one: the
policy file and the budget flags become an `AppConfig`, the endpoint flags an
`Endpoint`, the run flags a `ConversationSpec`. Configuration errors become
one line on stderr: a bad flag or setting exits 2, a policy file or audit
log that cannot be used exits 125.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import click

from sbx.agent import (
    DEFAULT_IMAGE,
    App,
    AppConfig,
    AuditError,
    ConversationSpec,
    Endpoint,
    LimitRefused,
    LimitsRequest,
    PolicyError,
    SettingsError,
    TranscriptError,
    load_config,
    local_note_store,
    os_principal,
    resolve_endpoint,
)
from sbx.agent.cli.errors import fail
from sbx.agent.cli.limit_flags import refused

_RECORD = click.Path(path_type=Path)
"""A file sbx opens itself (policy, audit log, transcript): a directory there is sbx's
error to report (exit 125, as every policy and audit-log problem), not a usage error."""


@dataclass(frozen=True, kw_only=True)
class FaceOptions:
    """What a command line gave; None means "not given" (the policy or a default decides)."""

    data: tuple[Path, ...] = ()
    """Files and directories mounted read-only at `/data/<name>`."""
    output: Path | None = None
    """Where artifacts are copied; default `sbx-output/<run_id>`."""
    policy: Path | None = None
    """The policy file; default the packaged `tools/sbx.toml`."""
    audit_log: Path | None = None
    """The audit log (`--audit-log` > `SBX_AUDIT_LOG` > policy > `./sbx-audit.jsonl`)."""
    transcript: Path | None = None
    """The transcript; default `sbx-runs/<id>.jsonl`."""
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
    limits: LimitsRequest = field(default_factory=LimitsRequest)
    """The limit flags (`--memory`, `--runtime`, ...): applied only below the policy's."""
    label: str | None = None
    """Shown first in the progress and kept in the transcript (the demo's "scripted model")."""

    def spec(self) -> ConversationSpec:
        """The conversation these options describe, asked by the OS user."""
        return ConversationSpec(
            principal=os_principal(), data=self.data, output=self.output, label=self.label,
            notes=local_note_store(os.environ),
        )


@contextmanager
def opened_app(options: FaceOptions) -> Iterator[tuple[App, Endpoint]]:
    """The application core and the endpoint, or one line on stderr and the right exit code."""
    with _operator_lines():
        config = configure(options)
        endpoint = resolve_endpoint(
            config.settings, base_url=options.base_url, api_key=options.api_key,
            model=options.model, environ=os.environ,
        )
        app = App.open(
            config, environ=os.environ, audit_log=options.audit_log,
            secrets=(endpoint.api_key,), image=options.image,
        )
    with app, _operator_lines():
        yield app, endpoint


@contextmanager
def opened_core(options: FaceOptions) -> Iterator[App]:
    """The application core without a model (`sbx exec`, `sbx replay --rerun`)."""
    with _operator_lines():
        app = App.open(
            configure(options), environ=os.environ, audit_log=options.audit_log,
            image=options.image,
        )
    with app, _operator_lines():
        yield app


@contextmanager
def _operator_lines() -> Iterator[None]:
    """Configuration errors as one line: a bad flag or setting exits 2, sbx's own 125."""
    try:
        yield
    except LimitRefused as exc:  # a limit flag above the policy's ceiling
        refused(exc)
    except SettingsError as exc:  # e.g. data the sandbox's user could not read
        fail(str(exc), 2)
    except (PolicyError, AuditError, TranscriptError) as exc:
        fail(str(exc))


def configure(options: FaceOptions) -> AppConfig:
    """The policy file read once, with the command line's flags applied.

    The limit flags go with each run (`limits=`, the core's one way in for them); a
    limit above the policy's is refused here already, before anything opens.
    """
    config = load_config(options.policy).with_flags(options.flags)
    config.limited(options.limits)
    return config


def run_options(command: Any) -> Any:
    """Where the run's inputs and records go; shared by `ask`, `demo` and `chat`."""
    options = [
        click.option("--output", type=click.Path(path_type=Path, file_okay=False),
                     help="Directory for files the code saves to /output. [default: "
                     "sbx-output/RUN_ID]"),
        click.option("--policy", type=_RECORD,
                     help="Policy file (tools, quotas, sandbox limits, [agent]). [default: the "
                     "packaged sbx.toml]"),
        click.option("--audit-log", type=_RECORD,
                     help="Audit log to append to. [default: $SBX_AUDIT_LOG, the policy's, or "
                     "./sbx-audit.jsonl]"),
        click.option("--transcript", type=_RECORD,
                     help="Transcript to write (JSON Lines). [default: sbx-runs/ID.jsonl]"),
        click.option("--image", default=DEFAULT_IMAGE, show_default=True, help="Sandbox image."),
    ]
    for option in reversed(options):
        command = option(command)
    return command


def model_options(command: Any) -> Any:
    """The endpoint, the budget and the tuning flags; omitted flags keep the policy's."""
    options = [
        click.option("--base-url", help="OpenAI-compatible endpoint. [env: OPENAI_BASE_URL]"),
        click.option("--api-key", help="API key (prefer the env var). [env: OPENAI_API_KEY]"),
        click.option("--model", help="Model name. [env: SBX_MODEL]"),
        click.option("--max-turns", type=int, help="Most model requests per question. "
                     "[default: 20]"),
        click.option("--max-tool-calls", type=int,
                     help="Most tool calls per question. [default: 40]"),
        click.option("--max-tool-calls-per-turn", type=int,
                     help="Most tool calls one reply may ask for. [default: 8]"),
        click.option("--max-time", "max_wall_time",
                     help="Wall-clock limit of one question's run, e.g. 10m. [default: 10m]"),
        click.option("--max-tokens", "max_total_tokens", type=int,
                     help="Most tokens (prompt + completion) per question. [default: 200000]"),
        click.option("--max-cost", type=click.FloatRange(min=0),
                     help="Most money one question's run may cost, in [agent.prices]' currency "
                     "(checked before each request and tool call). [default: no cap]"),
        click.option("--request-timeout",
                     help="Limit of one model HTTP request, e.g. 2m. [default: 120s]"),
        click.option("--max-retries", type=int,
                     help="Retries of a failed model request. [default: 2]"),
        click.option("--tool-format", type=click.Choice(["native", "text"]),
                     help="How the model runs code: native tool calls, or ```python blocks in "
                     "its text (models served without a tool-call parser). [default: native]"),
        click.option("--context-tokens", type=int,
                     help="Estimated size past which old observations are shortened. "
                     "[default: 60000]"),
    ]
    for option in reversed(options):
        command = option(command)
    return command
