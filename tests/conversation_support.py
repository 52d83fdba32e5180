"""A conversation in the core for tests: opened on the scripted model, asked, cancelled mid-run.

Shared by the tests that make a conversation lose its sandbox in every way and then
check what each reader of its history says (`test_history_export`, `test_outcome_words`).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path

from conftest import TEST_IMAGE
from sbx.agent.core.app import App
from sbx.agent.core.config import load_config
from sbx.agent.core.conversation import Conversation, ConversationSpec
from sbx.agent.core.events import Event, OutputChunk
from sbx.agent.core.settings import Endpoint
from sbx.agent.model.cancellation import Cancellation
from sbx.agent.testing.scripted_model import assistant, tool_call
from scripted_llm import FAKE_KEY, ScriptedLLM


@contextmanager
def open_conversation(llm: ScriptedLLM, tmp_path: Path, *, timeout: float,
                      data: tuple[Path, ...] = ()) -> Iterator[Conversation]:
    """A conversation whose executions time out after `timeout` s; transcript `conv.jsonl`."""
    config = load_config(None)
    config = replace(config, limits=config.limits.model_copy(update={"timeout": timeout}))
    spec = ConversationSpec(principal="os:analyst", data=data, output_root=tmp_path / "out")
    endpoint = Endpoint(base_url=llm.base_url, api_key=FAKE_KEY, model="scripted")
    with App.open(config, environ={}, audit_log=tmp_path / "audit.jsonl",
                  image=TEST_IMAGE) as app, app.conversation(
                      spec, endpoint=endpoint, transcript=tmp_path / "conv.jsonl") as conv:
        yield conv


def ask_code(conversation: Conversation, llm: ScriptedLLM, *codes: str) -> None:
    """One question whose model runs `codes`, in order, then answers."""
    llm.script([*(tool_call("execute_python", code=code) for code in codes), assistant("done")])
    result = conversation.ask("next step")
    assert result.status == "completed", result


def cancel_while_running(conversation: Conversation, llm: ScriptedLLM, code: str,
                         printed: str) -> None:
    """A question whose `code` the user cancels once its live output shows `printed`."""
    llm.script([tool_call("execute_python", code=code)])
    token, running = Cancellation(), threading.Event()

    def watch(event: Event) -> None:
        if isinstance(event, OutputChunk) and printed in event.text:
            running.set()

    unsubscribe = conversation.subscribe(watch)
    waiter = threading.Thread(target=lambda: running.wait(60) and token.cancel())
    waiter.start()
    result = conversation.ask("a slow step", cancel=token)
    waiter.join()
    unsubscribe()
    assert result.status == "cancelled", result
