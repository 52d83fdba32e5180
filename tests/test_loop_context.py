"""Self-correction support: a notice after repeated identical failures; a bounded context.

The observation text is the tools layer's; these tests check what the loop
adds (one notice) and what it shortens (old observations only, never the
question, the data preview or the newest error), and that the transcript
events keep every observation whole.
"""

from __future__ import annotations

import scripted_llm
from sbx.agent.core.compaction import shorten_text
from sbx.agent.testing.scripted_model import assistant, call, tool_call, tool_calls
from sbx.tools.registry import ToolFailure, tool
from scripted_llm import ask, policy, settings
from tools_support import make_gate

llm = scripted_llm.llm
no_real_model = scripted_llm.no_real_model

NOTICE = "[sbx] The last 3 calls to flaky failed the same way (error: Error from flaky: "


def _flaky_gate(tmp_path, failures):
    """A tool that fails with the next message of `failures` (or succeeds when it is None)."""

    @tool(sequential="flaky")  # one reply's calls run in order, so the failures come in order
    def flaky(n: int) -> str:
        """Fail on purpose.

        Args:
            n: Ignored.
        """
        message = failures.pop(0)
        if message is not None:
            raise ToolFailure(message)
        return "worked"

    gate, _ = make_gate(tmp_path, policy(custom=("flaky",)), extra_tools=[flaky])
    return gate


def _notices(request):
    return [m["content"] for m in request.messages if m["role"] == "user"][1:]


def test_three_identical_failures_in_a_row_bring_a_change_approach_notice(llm, tmp_path):
    gate = _flaky_gate(tmp_path, ["no such column 'x'"] * 3)
    llm.script([tool_call("flaky", n=1), tool_call("flaky", n=2), tool_call("flaky", n=3),
                assistant("I give up on column x.")])

    result = ask(llm, gate)

    assert result.status == "completed"
    assert _notices(llm.requests[2]) == []
    (notice,) = _notices(llm.requests[3])
    assert notice.startswith(NOTICE + "no such column 'x'). Repeating it will not help.")
    assert "try a completely different approach" in notice
    assert llm.requests[3].messages[-1]["content"] == notice  # right after the third observation


def test_a_different_failure_or_a_success_restarts_the_count(llm, tmp_path):
    gate = _flaky_gate(tmp_path, ["boom", "boom", "bang", "boom", None, "boom"])
    llm.script([tool_calls(call("flaky", n=1), call("flaky", n=2), call("flaky", n=3)),
                tool_calls(call("flaky", n=4), call("flaky", n=5), call("flaky", n=6)),
                assistant("ok")])

    result = ask(llm, gate)

    assert result.status == "completed"
    assert _notices(llm.requests[2]) == []


def test_older_observations_are_shortened_but_the_question_preview_and_newest_error_are_not(
    llm, tmp_path
):
    data = tmp_path / "table.csv"
    data.write_text("n,label\n" + "".join(f"{i},{'label-' * 6}{i}\n" for i in range(400)))

    @tool
    def dump(part: int, fail: bool = False) -> str:
        """Return a long text.

        Args:
            part: Which part.
            fail: Fail instead.
        """
        if fail:
            raise ToolFailure(f"part {part} is broken: " + "E" * 2400)
        return f"part {part}: " + "x" * 2400

    question = "Summarise the parts. " + "Q" * 200
    llm.script([
        tool_call("preview_data_file", name="table.csv", rows=50),
        tool_call("dump", part=1),
        tool_call("dump", part=2, fail=True),
        tool_call("dump", part=3),
        tool_call("dump", part=4),
        tool_call("dump", part=5),
        assistant("done"),
    ])
    gate, _ = make_gate(
        tmp_path, policy("preview_data_file", custom=("dump",)), extra_tools=[dump],
        data_paths=[data],
    )
    seen = []

    result = ask(llm, gate, question, agent_settings=settings(context_tokens=1000), events=seen)

    assert result.status == "completed"
    last = llm.requests[-1].messages
    assert last[1]["content"] == question
    tools = [m["content"] for m in last if m["role"] == "tool"]
    preview, part1, part2, part3, part4, part5 = tools
    assert "showing 50 row(s)" in preview and len(preview) > 1500  # the data preview: whole
    assert part2.startswith("Error from dump: part 2 is broken")  # the newest error: whole
    assert len(part2) > 2400
    assert part5 == "part 5: " + "x" * 2400  # the latest turn: not read yet, whole
    for shortened in (part1, part3):
        assert "characters of this older observation were cut" in shortened
        assert len(shortened) < 1200
    compactions = [e for e in seen if e.type == "compaction"]
    assert compactions and all(e.estimate > 0 for e in compactions)
    recorded = [e.content for e in seen if e.type == "tool_result"]
    assert recorded[1] == "part 1: " + "x" * 2400  # the transcript keeps everything


def test_shorten_text_keeps_head_and_tail_and_leaves_short_text_alone():
    text = "HEAD" + "m" * 5000 + "TAIL"
    short = shorten_text(text)
    assert short is not None
    assert short.startswith("HEAD") and short.endswith("TAIL")
    assert "[... 4108 characters of this older observation were cut" in short
    assert shorten_text("short") is None
    assert shorten_text(short) is None  # never shortened twice
