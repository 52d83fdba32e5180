"""The plan on the page, in a real browser against a real `sbx serve`.

The scripted model writes a plan of three steps, one execution fails, and
the plan is revised (a step dropped, one added). The page shows the plan as a
checklist above the steps while the run is still going (the model's next
turn waits until the test has seen it), redraws it on each revision over the
event stream, and says beside the answer which steps it leaves open; the run
resource carries the current plan while it runs and the final one after.
Model-written plan text is text, never markup.
"""

from __future__ import annotations

import json
import re
import threading

import pytest
from plan_support import LOAD, REPORT, SUM_BY_KEY, SUM_BY_ROW, planned_turns
from playwright.sync_api import expect

import service_support
import web_support
from web_support import signed_in_page, watch

serve = service_support.serve
llm = service_support.llm
browser = web_support.browser
render_page = web_support.render_page

PLAN_POLICY = {"tools.update_plan": {"enabled": True}}
HOSTILE = '<img src=x onerror="document.title=1">'


@pytest.mark.docker
def test_the_page_shows_the_plan_as_a_live_checklist_above_the_steps_and_revises_it(
    serve, llm, browser, tmp_path
):
    server = serve(f"sqlite:///{tmp_path / 'data' / 'sbx.db'}", policy=PLAN_POLICY)
    page, seen = signed_in_page(browser, server.url, server.key("ana"))
    looked = threading.Event()
    turns = planned_turns()
    held = turns[1]

    def after_the_test_looked(request):
        looked.wait(timeout=120)  # the run is still going while the test looks at the page
        return held

    turns[1] = after_the_test_looked
    llm.script(turns)
    page.get_by_label("Your question").fill("What is the total?")
    page.get_by_label("Your question").press("Enter")

    run = page.locator(".run").nth(0)
    plan = run.get_by_role("region", name="Plan")
    items = plan.locator(".plan-step")
    expect(items).to_have_count(3)
    expect(items.nth(0)).to_have_attribute("data-status", "in_progress")
    expect(items.locator(".plan-text")).to_have_text([LOAD, SUM_BY_KEY, REPORT])
    expect(plan.locator("h3")).to_have_text("Plan · revision 1")
    expect(run.locator(".run-status")).not_to_contain_text("completed")  # live: not ended
    assert run.evaluate(  # the checklist sits above the steps
        "node => !!(node.querySelector('.plan').compareDocumentPosition("
        "node.querySelector('.steps')) & Node.DOCUMENT_POSITION_FOLLOWING)")
    client = server.client()
    client.cookies.update({c["name"]: c["value"] for c in browser.cookies()})
    run_id = run.get_attribute("data-run-id")
    running = client.get(f"/v1/runs/{run_id}").json()  # the run resource carries it live too
    assert running["status"] == "running"
    assert [step["description"] for step in running["plan"]] == [LOAD, SUM_BY_KEY, REPORT]
    looked.set()

    expect(plan.locator("h3")).to_have_text("Plan · revision 3")
    expect(items).to_have_count(4)
    expect(items.locator(".plan-text")).to_have_text([LOAD, SUM_BY_KEY, SUM_BY_ROW, REPORT])
    expect(items.nth(1)).to_have_class(re.compile(r"\bplan-dropped\b"))
    expect(items.nth(2)).to_have_attribute("data-status", "done")
    expect(run.locator(".step.failed")).to_have_count(1)
    answer = run.get_by_role("region", name="Answer")
    expect(answer.locator(".answer-text")).to_have_text("The total is 6.")
    expect(answer.locator(".answer-plan-open")).to_have_text(
        f"⚠ The answer leaves 1 plan step(s) not done: {REPORT}")

    resource = client.get(f"/v1/runs/{run_id}").json()
    assert [step["status"] for step in resource["plan"]] == ["done", "dropped", "done", "pending"]
    assert resource["plan_pending"] == [REPORT]

    page.reload()  # read back from the stored events: the final plan again
    page.locator("#conversation-list button").first.click()
    expect(page.locator(".run .plan h3")).to_have_text("Plan · revision 3")
    seen.assert_clean()


@pytest.mark.docker
def test_model_written_plan_text_is_shown_as_text(serve, browser, tmp_path):
    server = serve(f"sqlite:///{tmp_path / 'data' / 'sbx.db'}")
    page = browser.new_page()
    seen = watch(page)
    page.goto(server.url + "/")
    page.evaluate("""async (hostile) => {
        const { RunView } = await import('/static/run.js');
        const view = new RunView('run-0123456789ab', 'q?');
        document.body.append(view.root);
        view.handle({type: 'plan', revision: 2, note: hostile,
                     steps: [{description: hostile, status: 'pending', tool: hostile},
                             {description: 'x', status: '<b>bad</b>'}],
                     changes: [{change: 'removed', step: hostile}]});
        view.handle({type: 'run_end', status: 'completed', answer: 'a', plan_pending: [hostile]});
    }""", HOSTILE)
    plan = page.locator(".plan")
    expect(plan.locator(".plan-text").first).to_have_text(HOSTILE)
    expect(plan.locator(".plan-tool")).to_have_text(f" · {HOSTILE}")
    expect(plan.locator(".plan-note")).to_have_text(f"Why it changed: {HOSTILE}")
    expect(plan.locator(".plan-removed")).to_have_text(f"Removed: {HOSTILE}")
    expect(plan.locator(".plan-step").nth(1)).to_have_attribute("data-status", "pending")
    expect(page.locator(".answer-plan-open")).to_contain_text(HOSTILE)
    assert page.locator("img").count() == 0 and page.title() != "1"
    seen.assert_clean()


def _call(call_id: str, name: str, **arguments: object) -> dict:
    return {"id": call_id, "function": {"name": name, "arguments": json.dumps(arguments)}}


@pytest.mark.docker
def test_update_plan_calls_are_the_checklist_and_not_steps_unless_refused(render_page):
    page = render_page
    steps = [{"description": LOAD, "status": "in_progress"}]
    page.evaluate("events => events.forEach((event) => window.view.handle(event))", [
        {"type": "model_reply", "message": {"tool_calls": [_call("p1", "update_plan",
                                                                 steps=steps)]}},
        {"type": "tool_result", "call_id": "p1", "name": "update_plan", "failed": False,
         "content": "Plan updated (revision 1)."},
        {"type": "plan", "revision": 1, "steps": steps, "changes": []},
        {"type": "model_reply", "message": {"tool_calls": [
            _call("c1", "execute_python", code="print(1)"), _call("p2", "update_plan", note="x")]}},
        {"type": "tool_result", "call_id": "c1", "name": "execute_python", "failed": False,
         "content": "1", "execution": {"stdout": "1\n"}},
        {"type": "tool_result", "call_id": "p2", "name": "update_plan", "failed": True,
         "content": "Invalid arguments for update_plan: steps is required"},
    ])
    expect(page.locator(".plan .plan-step")).to_have_count(1)
    expect(page.locator(".step h3")).to_have_text(["Step 1 · execute_python",
                                                   "Step 2 · update_plan"])
    refused = page.locator(".step").nth(1)
    expect(refused.locator(".error-text")).to_have_text(
        "Invalid arguments for update_plan: steps is required")  # a refusal is shown
    expect(refused.locator("pre.args")).to_contain_text('"note": "x"')  # what the model sent
    assert page.locator(".step").nth(0).locator("pre.args").count() == 0
