"""The web page answers the model's questions: ask_user in a real browser.

A run whose model calls `ask_user` ends `needs_input`; the page shows the
question and a field to answer it under the run; sending the answer starts
the run that continues it, whose answer appears below, and the field goes.
Debian's chromium driven by Playwright against a real `sbx serve`; the model
is scripted; every wait is on the page's own state.
"""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

import service_support
import web_support
from sbx.agent.testing.scripted_model import ScriptedRequest, assistant, tool_call
from web_support import sign_in, signed_in_page

serve = service_support.serve
llm = service_support.llm
browser = web_support.browser

QUESTION = "Count refunds as <b>sales</b>?"  # markup in the model's text stays text


@pytest.mark.docker
def test_the_page_shows_the_models_question_and_the_answer_continues_the_run(
    serve, llm, browser, tmp_path
):
    server = serve(f"sqlite:///{tmp_path / 'data' / 'sbx.db'}",
                   policy={"tools.ask_user": {"enabled": True}})
    page, seen = signed_in_page(browser, server.url, server.key("rita"))

    def told(request: ScriptedRequest):
        assert "Leave refunds out." in request.messages[-1]["content"]
        return assistant("Refunds are left out of the total, as you asked.")

    llm.script([tool_call("ask_user", question=QUESTION), told])
    page.get_by_label("Your question").fill("What is the total?")
    page.get_by_label("Your question").press("Enter")

    first = page.locator(".run").nth(0)
    expect(first.locator(".ask-user-question")).to_contain_text(QUESTION)
    expect(first.locator(".run-status")).to_contain_text("needs input")
    assert first.locator(".ask-user b").count() == 0
    assert first.locator(".step, pre.args").count() == 0  # the question once, not its JSON too
    page.get_by_label("Your answer").fill("Leave refunds out.")
    page.get_by_role("button", name="Send answer").click()

    second = page.locator(".run").nth(1)
    expect(second.locator(".who").first).to_have_text("You answered")
    expect(second.locator(".question-text")).to_have_text("Leave refunds out.")
    expect(second.locator(".answer-text")).to_have_text(
        "Refunds are left out of the total, as you asked.")
    expect(page.locator(".ask-user form")).to_have_count(0)  # answered: the field is gone
    expect(first.locator(".ask-user-question")).to_contain_text(QUESTION)  # the question stays

    page.reload()  # read back: the question stays on the record, the field does not come back
    page.locator("#conversation-list button").first.click()
    expect(page.locator(".run")).to_have_count(2)
    expect(page.locator(".run").nth(1).locator(".answer-text")).to_be_visible()
    expect(page.locator(".run").nth(0).locator(".ask-user-question")).to_contain_text(QUESTION)
    expect(page.locator(".ask-user form")).to_have_count(0)
    seen.assert_clean()


@pytest.mark.docker
def test_limits_chosen_on_the_page_apply_below_the_policy_and_are_refused_above_it(
    serve, llm, browser, tmp_path
):
    server = serve(f"sqlite:///{tmp_path / 'data' / 'sbx.db'}")  # [sandbox] timeout = "60s"
    page = browser.new_page()
    sign_in(page, server.url, server.key("tess"))
    page.locator("#limits summary").click()

    page.get_by_label("Time limit per execution").fill("1h")
    page.get_by_label("Your question").fill("Sleep.")
    page.get_by_label("Your question").press("Enter")
    expect(page.locator("#ask-status")).to_contain_text(
        "limits.timeout: at most 1m (the policy's [sandbox] timeout)")
    expect(page.locator(".run")).to_have_count(0)  # nothing was opened, nothing ran

    llm.script([tool_call("execute_python", code="import time\ntime.sleep(30)"),
                assistant("It ran out of time.")])
    page.get_by_label("Time limit per execution").fill("2s")
    page.get_by_label("Your question").fill("Sleep.")
    page.get_by_label("Your question").press("Enter")
    expect(page.locator("#conversation-data")).to_contain_text("limits: timeout 2")
    run = page.locator(".run").nth(0)
    expect(run.locator(".answer-text")).to_have_text("It ran out of time.")
    expect(run.locator(".error-headline")).to_contain_text("Timed out")
