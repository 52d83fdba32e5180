"""`--tool-format text`: models without native tool calling write ```python blocks, and sbx runs
each as `execute_python`; the gate, the budgets, the audit log and the transcript are unchanged.

Parsing is checked on its own; the acceptance runs the demo question through `sbx ask` with a
scripted model that writes fenced blocks, over the real SDK, into the real sandbox.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

import scripted_llm
from conftest import TEST_IMAGE
from sbx.agent.cli.demo import QUESTION, demo_data, demo_turns, fenced
from sbx.agent.cli.main import cli
from sbx.agent.core.loop import run
from sbx.agent.core.prompt import build_system_prompt
from sbx.agent.core.settings import AgentSettings, Budget
from sbx.agent.model.reply import ModelReply
from sbx.agent.model.textformat import as_text_messages, code_blocks, with_code_calls
from sbx.agent.testing.scripted_model import assistant
from scripted_llm import model_for, policy
from tools_support import SubprocessRunner, events, make_gate

llm = scripted_llm.llm
no_real_model = scripted_llm.no_real_model


def test_only_python_fenced_blocks_count():
    reply = (
        "First:\n```python\nx = 1\nprint(x)\n```\n"
        "not code:\n```py\nprint('py')\n```\n~~~python\nprint('tilde')\n~~~\n"
        "```\nprint('bare')\n```\n  ```python\nprint('indented')\n  ```\n"
        "```python\n   \n```\n"
        "Then:\n```python  \nprint(x + 1)\n```\n"
        "```python\nprint('never closed')\n"
    )
    assert code_blocks(reply) == ["x = 1\nprint(x)\n", "print(x + 1)\n"]
    assert code_blocks("The answer is 42.") == []
    assert code_blocks("Use `print()` inline, or ```python print(1)``` on one line.") == []


def test_blocks_become_execute_python_calls_and_a_reply_without_one_is_the_answer():
    text = fenced("print(1)\n", "Computing.") + fenced("print(2)\n", "And:")
    reply = with_code_calls(ModelReply(content=text), max_argument_bytes=1000)
    assert [c.name for c in reply.tool_calls] == ["execute_python", "execute_python"]
    assert [json.loads(c.arguments) for c in reply.tool_calls] == [
        {"code": "print(1)\n"}, {"code": "print(2)\n"}
    ]
    assert len({c.id for c in reply.tool_calls}) == 2
    assert reply.content == text  # the model's own words are kept
    answer = ModelReply(content="The total is 3.")
    assert with_code_calls(answer, max_argument_bytes=1000) is answer
    huge = with_code_calls(
        ModelReply(content=fenced("x = 1\n" * 100, "Big:")), max_argument_bytes=100
    )
    assert "not kept" in str(huge.tool_calls[0].kept_arguments)  # the gate refuses it


def test_the_model_reads_its_turns_back_as_text():
    messages = [
        {"role": "system", "content": "s"},
        {"role": "user", "content": "q"},
        {"role": "assistant", "content": "two blocks",
         "tool_calls": [{"id": "a", "type": "function", "function": {"name": "execute_python",
                                                                     "arguments": "{}"}}] * 2},
        {"role": "tool", "tool_call_id": "a", "content": "[stdout]\n1"},
        {"role": "tool", "tool_call_id": "b", "content": "[stdout]\n2"},
        {"role": "user", "content": "[sbx] a notice"},
    ]
    assert as_text_messages(messages) == [
        {"role": "system", "content": "s"},
        {"role": "user", "content": "q"},
        {"role": "assistant", "content": "two blocks"},
        {"role": "user",
         "content": "Output of python block 1:\n[stdout]\n1\n\n"
                    "Output of python block 2:\n[stdout]\n2"},
        {"role": "user", "content": "[sbx] a notice"},
    ]


def test_the_prompt_says_how_to_write_code_in_text_mode():
    native = build_system_prompt(data=[], tools=["execute_python"], timeout_s=30, memory="1 GiB")
    text = build_system_prompt(
        data=[], tools=["execute_python"], timeout_s=30, memory="1 GiB", tool_format="text"
    )
    assert native.version == text.version == "5"
    assert "starts with a line ```python" in text.text and "You can call" not in text.text
    assert "You can call: `execute_python`." in native.text and "```python" not in native.text


def test_blocks_count_against_the_budget_and_pass_the_gate(llm, tmp_path):
    runner = SubprocessRunner()
    three = "".join(fenced(f"print({n})\n", f"Block {n}.") for n in range(3))
    llm.script([assistant(three)])
    settings = AgentSettings(tool_format="text", budget=Budget(max_tool_calls_per_turn=2))
    gate, log = make_gate(tmp_path, policy("execute_python"), runner=runner)
    with model_for(llm, settings) as model:
        result = run("Count.", model=model, gate=gate, settings=settings, system_prompt="s")
    assert result.status == "tool_limit" and runner.calls == []
    assert "tools" not in llm.requests[0].body  # nothing on the wire says "tools"

    llm.script([assistant(fenced("print(6 * 7)\n", "Computing.")), assistant("It is 42.")])
    (tmp_path / "again").mkdir()
    gate, log = make_gate(tmp_path / "again", policy("execute_python"), runner=runner)
    settings = AgentSettings(tool_format="text")
    with model_for(llm, settings) as model:
        result = run("6 * 7?", model=model, gate=gate, settings=settings, system_prompt="s")
    assert (result.status, result.answer, result.tool_calls) == ("completed", "It is 42.", 1)
    assert runner.calls == ["print(6 * 7)\n"]
    assert [o["tool"] for o in events(log, "outcome")] == ["execute_python"]
    sent = llm.requests[-1].messages
    assert sent[-1]["role"] == "user"
    assert sent[-1]["content"].startswith("Output of your python block:\n[stdout]\n42\n")
    assert all(m["role"] != "tool" and "tool_calls" not in m for m in sent)


@pytest.mark.docker
def test_text_format_answers_the_demo_question(llm, tmp_path, engine):
    llm.script(demo_turns("text"))
    data = demo_data(tmp_path)
    outcome = CliRunner().invoke(cli, [
        "ask", QUESTION, "--data", str(data), "--tool-format", "text", "--json",
        "--base-url", llm.base_url, "--api-key", "sk-text", "--model", "small-local",
        "--image", TEST_IMAGE, "--audit-log", str(tmp_path / "audit.jsonl"),
        "--transcript", str(tmp_path / "run.jsonl"), "--output", str(tmp_path / "out"),
    ])
    assert outcome.exit_code == 0, outcome.output
    document = json.loads(outcome.stdout)
    assert document["status"] == "completed"
    assert "grew fastest in 2024: revenue" in document["answer"]
    assert all("tools" not in request.body for request in llm.requests)
    assert "AttributeError: 'list' object has no attribute 'mean'" in (
        llm.requests[1].messages[-1]["content"]
    )
    lines = [json.loads(line) for line in (tmp_path / "run.jsonl").read_text().splitlines()]
    results = [line for line in lines if line["type"] == "tool_result"]
    assert [(r["name"], r["failed"]) for r in results] == [
        ("execute_python", True), ("execute_python", False)
    ]
    start = next(line for line in lines if line["type"] == "run_start")
    assert start["settings"]["tool_format"] == "text" and start["prompt_version"] == "5"
    audit = tmp_path / "audit.jsonl"
    assert [o["tool"] for o in events(audit, "outcome")] == ["execute_python"] * 2
    assert Path(document["artifacts"][0]).read_bytes().startswith(b"\x89PNG")
