"""Errors on the page read for an analyst, in a real browser against a real `sbx serve`.

A model endpoint that answers HTTP 500 to every attempt is the operator's to fix: the page
says what failed, what to do and which incident to quote, styled as an error, with no
command-line flag and no `[REDACTED]` left where the endpoint's URL was; the API's run
says the same. A quota refusal (429) says when to try again, from its `Retry-After`.
"""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

import service_support
import web_support
from sbx.agent.testing.scripted_model import HttpFailure, assistant
from web_support import screenshot, signed_in_page

serve = service_support.serve
llm = service_support.llm
browser = web_support.browser

FLAG = re.compile(r"--[a-z]")


@pytest.mark.docker
def test_a_failed_model_request_reads_as_an_analysts_error_with_an_incident_to_quote(
    serve, llm, browser, tmp_path
):
    server = serve(f"sqlite:///{tmp_path / 'data' / 'sbx.db'}")
    page, seen = signed_in_page(browser, server.url, server.key("ana"))
    llm.script([HttpFailure(status=500, message="upstream exploded")] * 3)  # 2 retries

    page.get_by_label("Your question").fill("What is the total revenue?")
    page.get_by_label("Your question").press("Enter")
    run = page.locator(".run").nth(0)
    message = run.locator(".run-message")
    expect(message).to_contain_text("HTTP 500")
    expect(message).to_have_class(re.compile(r"\berror-text\b"))
    expect(message).to_have_attribute("role", "alert")
    expect(run).to_have_class(re.compile(r"\brun-model_error\b"))
    text = message.inner_text()
    assert "The model could not answer" in text and "try again" in text, text
    assert not FLAG.search(text) and "[REDACTED]" not in text and "endpoint" not in text, text
    incident = re.search(r"incident (inc-[0-9a-f]{12})", text)
    assert incident, text
    bad = page.evaluate("getComputedStyle(document.documentElement).getPropertyValue('--bad')")
    assert message.evaluate("node => getComputedStyle(node).color") == _rgb(page, bad)
    screenshot(page, "web-model-error.png", tmp_path)

    client = server.client()
    client.cookies.update({c["name"]: c["value"] for c in browser.cookies()})
    stored = client.get(f"/v1/runs/{run.get_attribute('data-run-id')}").json()
    assert stored["status"] == "model_error"
    assert stored["message"] == text  # one wording, one incident: the stream's and the store's
    assert incident.group(1) in server.log and "upstream exploded" in server.log
    seen.assert_clean()


@pytest.mark.docker
def test_a_quota_refusal_on_the_page_says_when_to_try_again(serve, llm, browser, tmp_path):
    server = serve(f"sqlite:///{tmp_path / 'data' / 'sbx.db'}")
    page, seen = signed_in_page(browser, server.url, server.key("ana", runs_per_hour=1))
    llm.script([assistant("Nothing to compute.")])
    page.get_by_label("Your question").fill("hello?")
    page.get_by_label("Your question").press("Enter")
    expect(page.locator(".run .answer-text")).to_have_text("Nothing to compute.")
    expect(page.get_by_role("button", name="Ask")).to_be_enabled()  # the run followed to its end

    page.get_by_label("Your question").fill("and again?")
    page.get_by_label("Your question").press("Enter")
    status = page.locator("#ask-status")
    expect(status).to_contain_text("runs_per_hour")
    expect(status).to_contain_text(re.compile(r"Try again in (\d+ min|1 h)( \d+ min)? \(at .+\)\."))
    expect(status).to_have_attribute("data-kind", "error")
    assert all("status of 429" in line for line in seen.console_errors), seen  # the refusal
    seen.console_errors.clear()
    seen.assert_clean()


def _rgb(page, color: str) -> str:
    """A CSS colour as the browser computes it (`rgb(r, g, b)`)."""
    return page.evaluate("""(color) => {
        const probe = document.createElement('span');
        probe.style.color = color;
        document.body.append(probe);
        const rgb = getComputedStyle(probe).color;
        probe.remove();
        return rgb;
    }""", color.strip())
