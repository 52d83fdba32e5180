"""Fixtures for the agent tests: the scripted LLM server, a no-real-model guard, and run helpers.

Only the model is scripted: the `openai` SDK, HTTP, the gate, the audit log
and (where marked `docker`) the sandbox are real. A test module uses these
fixtures by binding them at module level:

    llm = scripted_llm.llm
    no_real_model = scripted_llm.no_real_model   # autouse: strips OPENAI_*, proxies
    sandbox = scripted_llm.sandbox               # a runc session, for `docker` tests

`llm` fails the test at teardown if a request came that the script did not
expect or if turns were left unconsumed.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from conftest import TEST_IMAGE, no_real_model  # noqa: F401 - autouse guard
from sbx.agent.core.loop import run
from sbx.agent.core.settings import AgentSettings, Budget, Endpoint
from sbx.agent.core.state import RunResult
from sbx.agent.core.transcript import Event
from sbx.agent.model.client import ModelClient
from sbx.agent.testing.scripted_model import Reply, ScriptedLLM, ScriptedRequest
from sbx.sandbox.engine import Engine
from sbx.sandbox.limits import Limits
from sbx.sandbox.session import Session
from sbx.sandbox.spec import SessionSpec
from sbx.tools.gate import ToolGate
from sbx.tools.policy import Policy

FIXTURES = Path(__file__).parent / "fixtures" / "turns"
FAKE_KEY = "sk-test-SCRIPTED0123456789abcdefghijkl"
SYSTEM = "You are a test. Use tools when told."
HELD_BACK_S = 60.0


def held_back(release: threading.Event, reply: Reply) -> Callable[[ScriptedRequest], Reply]:
    """A scripted turn that answers only once the test releases it (a slow model, on cue)."""

    def responder(request: ScriptedRequest) -> Reply:
        release.wait(HELD_BACK_S)
        return reply

    return responder


@pytest.fixture
def sandbox(engine: Engine, output_dir: Path) -> Iterator[Session]:
    """A session for the agent tests: runc only (the security tests cover every runtime)."""
    with Session.open(
        SessionSpec(limits=Limits(timeout="10s"), image=TEST_IMAGE, output_dir=output_dir),
        engine=engine,
    ) as live:
        yield live


@pytest.fixture
def llm() -> Iterator[ScriptedLLM]:
    """A started scripted server; at teardown, every turn must have been used, no more."""
    server = ScriptedLLM().start()
    try:
        yield server
    finally:
        server.close()
    server.assert_complete()


def body(observation: str) -> str:
    """An observation without its `[resources]` line (timings differ from run to run)."""
    lines = observation.splitlines()
    return "\n".join(line for line in lines if not line.startswith("[resources] "))


def policy(*enabled: str, custom: tuple[str, ...] = (), **extra: Any) -> Policy:
    """A policy enabling the named built-in tools (and custom ones); `extra` merges top-level."""
    tools: dict[str, Any] = {name: {"enabled": True} for name in enabled}
    if custom:
        tools["custom"] = {name: {"enabled": True} for name in custom}
    return Policy.model_validate({"tools": tools, **extra})


def settings(**budget: Any) -> AgentSettings:
    """Settings with a budget override; top-level settings (`max_retries`, caps) too."""
    top = {
        key: budget.pop(key)
        for key in (
            "max_retries",
            "context_tokens",
            "request_timeout",
            "max_answer_chars",
            "max_argument_bytes",
            "max_reply_bytes",
        )
        if key in budget
    }
    return AgentSettings(budget=Budget(**budget), **top)


def model_for(llm: ScriptedLLM, agent_settings: AgentSettings) -> ModelClient:
    """A real SDK client pointed at the scripted server."""
    endpoint = Endpoint(base_url=llm.base_url, api_key=FAKE_KEY, model="scripted")
    return ModelClient.connect(endpoint, agent_settings)


def ask(
    llm: ScriptedLLM,
    gate: ToolGate,
    question: str = "What is the answer?",
    *,
    agent_settings: AgentSettings | None = None,
    events: list[Event] | None = None,
) -> RunResult:
    """Run the loop once against the scripted server; events are appended to `events`."""
    chosen = agent_settings or settings()
    sink = events.append if events is not None else (lambda event: None)
    with model_for(llm, chosen) as model:
        return run(
            question, model=model, gate=gate, settings=chosen, system_prompt=SYSTEM, emit=sink
        )
