"""The plan tool's bounds, revisions and place in the state, without a sandbox.

The scripted model calls `update_plan` through the real SDK, HTTP and gate
(audited); the sandbox tests (the plan across a failing execution, the
follow-up, the faces) are in `test_plan_run.py` and `test_web_plan.py`.
"""

from __future__ import annotations

import io

import scripted_llm
from sbx.agent.cli.display import Progress
from sbx.agent.core.compaction import shorten_observations
from sbx.agent.core.events import PlanUpdated, RunEnd
from sbx.agent.core.plan import changes, plan_from_messages
from sbx.agent.core.prompt import build_system_prompt
from sbx.agent.core.state import Observation, RunState
from sbx.agent.testing.scripted_model import assistant, call, tool_call, tool_calls
from sbx.tools.builtin.plan import PlanStep
from scripted_llm import ask, policy
from tools_support import events, make_gate

llm = scripted_llm.llm
no_real_model = scripted_llm.no_real_model


def _steps(*pairs: tuple[str, str]) -> list[dict]:
    return [{"description": text, "status": status} for text, status in pairs]


def test_an_oversized_plan_is_refused_with_a_clear_observation_and_audited(llm, tmp_path):
    thirteen = _steps(*[(f"step {n}", "pending") for n in range(13)])
    long_step = _steps(("x" * 201, "pending"))
    llm.script([
        tool_call("update_plan", steps=thirteen),
        tool_call("update_plan", steps=long_step),
        tool_call("update_plan", steps=[]),
        tool_call("update_plan", steps=_steps(("add the numbers", "in_progress"))),
        assistant("Done."),
    ])
    gate, log = make_gate(tmp_path, policy("update_plan"))
    seen: list = []

    result = ask(llm, gate, events=seen)

    assert llm.requests[1].last_tool_message == (
        "Call to 'update_plan' denied by policy rule tools.update_plan.max_steps: the plan has "
        "13 steps, at most 12 are allowed; merge steps into fewer, larger ones"
    )
    assert llm.requests[2].last_tool_message == (
        "Call to 'update_plan' denied by policy rule tools.update_plan.max_step_chars: step 1's "
        "description has 201 characters, at most 200 are allowed; describe it in a few words"
    )
    assert "the plan has no steps" in llm.requests[3].last_tool_message
    assert llm.requests[4].last_tool_message.startswith(
        "Plan saved (revision 1 of at most 20 in this run):\n1. [>] add the numbers"
    )
    decisions = [(d["decision"], d.get("rule")) for d in events(log, "decision")]
    assert decisions == [
        ("denied", "tools.update_plan.max_steps"), ("denied", "tools.update_plan.max_step_chars"),
        ("denied", "tools.update_plan.max_steps"), ("allowed", None),
    ]
    plans = [e for e in seen if isinstance(e, PlanUpdated)]  # only the accepted one
    assert [(p.revision, [s.description for s in p.steps]) for p in plans] == [
        (1, ["add the numbers"])
    ]
    assert result.plan == (PlanStep(description="add the numbers", status="in_progress"),)
    assert result.plan_pending == ("add the numbers",)  # beside the answer
    end = next(e for e in seen if isinstance(e, RunEnd))
    assert end.plan_pending == ["add the numbers"]
    # a conversation taken up from its record finds the plan in its messages, refusals skipped
    assert plan_from_messages(result.messages) == (result.plan, 1)


def test_revisions_per_run_are_bounded(llm, tmp_path):
    one = _steps(("a", "in_progress"))
    llm.script([
        tool_call("update_plan", steps=one),
        tool_call("update_plan", steps=_steps(("a", "done"))),
        assistant("Done."),
    ])
    rules = {"tools": {"update_plan": {"enabled": True, "max_updates": 1}}}
    gate, _ = make_gate(tmp_path, policy(**rules))

    result = ask(llm, gate)

    assert llm.requests[2].last_tool_message == (
        "Call to 'update_plan' denied by policy rule tools.update_plan.max_updates: this run "
        "already saved its plan 1 times, the most allowed; go on with the plan you have"
    )
    assert [step.status for step in result.plan] == ["in_progress"]  # the refused one: no change


def test_two_plans_in_one_reply_are_both_recorded_in_order(llm, tmp_path):
    llm.script([
        tool_calls(call("update_plan", "p1", steps=_steps(("a", "pending"), ("b", "pending"))),
                   call("update_plan", "p2", steps=_steps(("a", "done"), ("c", "pending")),
                        note="b was not needed")),
        assistant("Done."),
    ])
    gate, _ = make_gate(tmp_path, policy("update_plan"))
    seen: list = []

    result = ask(llm, gate, events=seen)

    plans = [e for e in seen if isinstance(e, PlanUpdated)]
    assert [(p.call_id, p.revision) for p in plans] == [("p1", 1), ("p2", 2)]
    assert plan_from_messages(result.messages) == (result.plan, 2)
    assert [c.model_dump() for c in plans[1].changes] == [
        {"change": "status", "step": "a", "before": "pending", "after": "done"},
        {"change": "added", "step": "c", "before": None, "after": "pending"},
        {"change": "removed", "step": "b", "before": "pending", "after": None},
    ]
    assert plans[1].note == "b was not needed"


def test_a_disabled_plan_tool_is_not_offered(llm, tmp_path):
    llm.script([assistant("Done.")])
    gate, _ = make_gate(tmp_path, policy("calculate"))
    ask(llm, gate)
    names = [tool["function"]["name"] for tool in llm.requests[0].body["tools"]]
    assert names == ["calculate"]


def test_changes_match_steps_by_description_ignoring_case_and_spacing():
    old = [PlanStep(description="Load  the data", status="done")]
    new = [PlanStep(description="load the data", status="done"),
           PlanStep(description="plot", status="pending", tool="execute_python")]
    assert [(c.change, c.step) for c in changes(old, new)] == [("added", "plot")]


def test_compaction_never_shortens_the_current_plan():
    big = "x" * 5000
    messages = [{"role": "system", "content": "s"}, {"role": "user", "content": "q"}]
    observations = []
    for turn, tool in enumerate(["update_plan", "execute_python", "update_plan", "calculate",
                                 "execute_python"], start=1):
        observations.append(Observation(index=len(messages), tool=tool, failed=False, turn=turn))
        messages.append({"role": "tool", "tool_call_id": str(turn), "content": f"{tool} {big}"})
    state = RunState(run_id="r", started=0.0, messages=messages, observations=observations)

    done = shorten_observations(state, limit_tokens=100, tools=[])

    assert done == [2, 3, 5]  # the older plan may be cut; the latest turn's (6) is kept
    assert messages[4]["content"] == f"update_plan {big}"  # the current plan, whole


def test_the_cli_shows_the_checklist_escaped_and_marks_what_changed():
    out = io.StringIO()
    render = Progress(out)
    render(PlanUpdated.model_validate({
        "run_id": "r", "revision": 2, "note": "the \x1b[2Jjoin failed",
        "steps": [{"description": "load", "status": "done", "tool": "execute_python"},
                  {"description": "join \x1b]8;;http://x\x07", "status": "dropped"},
                  {"description": "merge instead", "status": "in_progress"}],
        "changes": [{"change": "status", "step": "join \x1b]8;;http://x\x07", "before": "pending",
                     "after": "dropped"},
                    {"change": "added", "step": "merge instead", "after": "in_progress"},
                    {"change": "removed", "step": "old <b>", "before": "pending"}],
    }))
    text = out.getvalue()
    assert "\x1b" not in text
    assert text.splitlines() == [
        "   plan (revision 2): the \\x1b[2Jjoin failed",
        "   [x] 1. load (execute_python)",
        "   [-] 2. join \\x1b]8;;http://x\\x07  <- was pending",
        "   [>] 3. merge instead  <- new",
        "   (removed) old <b>",
    ]


def test_the_prompt_asks_for_a_plan_only_where_the_model_can_write_one():
    def prompt(tools, tool_format="native"):
        return build_system_prompt(data=[], tools=tools, timeout_s=30, memory="512 MiB",
                                   tool_format=tool_format).text

    asks = "first write a plan with\n  `update_plan`"
    assert asks in prompt(["execute_python", "update_plan"])
    assert asks not in prompt(["execute_python"])
    assert asks not in prompt(["execute_python", "update_plan"], tool_format="text")
    assert "$planning" not in prompt(["execute_python"])
