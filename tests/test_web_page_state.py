"""The page keeps what the user sees: Cancel keeps the output, a reload keeps the conversation.

In a real browser against a real `sbx serve`: Cancel leaves the output the
user was watching on the page, says nothing about Ctrl-C or SIGTERM (the
core's message is the same for every face), and leaves no "Cancelling…"
behind; a reload opens the conversation that was open; a dataset named in
another script is listed by its name.
"""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

import service_support
import web_support
from sbx.agent.cli.scripted_model import assistant, tool_call
from service_support import upload
from web_support import sign_in, watch

serve = service_support.serve
llm = service_support.llm
browser = web_support.browser

SLOW = "import time\nprint('tick', 6 * 7, flush=True)\ntime.sleep(120)\nprint('never')"


@pytest.mark.docker
def test_cancel_keeps_the_output_and_says_nothing_of_signals(serve, llm, browser, tmp_path):
    server = serve(f"sqlite:///{tmp_path / 'data' / 'sbx.db'}")
    page = browser.new_page()
    seen = watch(page)
    sign_in(page, server.url, server.key("cleo"))
    llm.script([tool_call("execute_python", code=SLOW)])
    page.get_by_label("Your question").fill("count slowly")
    page.get_by_role("button", name="Ask").click()
    run = page.locator(".run").first
    expect(run.locator(".step .live")).to_contain_text("tick 42")
    page.get_by_role("button", name="Cancel run").click()
    expect(run).to_have_class(re.compile(r"\brun-cancelled\b"))
    watched = run.locator(".step .live:visible, .step .outcome pre")
    expect(watched.first).to_contain_text("tick 42")  # what the user was watching stays
    expect(run.locator(".run-message")).to_be_visible()
    assert not re.search(r"Ctrl-C|SIGTERM", run.inner_text())
    expect(page.locator("#ask-status")).not_to_contain_text("Cancelling")
    expect(page.get_by_role("button", name="Cancel run")).to_be_hidden()
    seen.assert_clean()


@pytest.mark.docker
def test_a_reload_opens_the_open_conversation_and_unicode_names_are_listed(
    serve, llm, browser, tmp_path
):
    server = serve(f"sqlite:///{tmp_path / 'data' / 'sbx.db'}")
    key = server.key("dana")
    dataset = upload(server.client(key), "销售 2024.csv", b"region,revenue\nNorth,10\n").json()
    assert dataset["name"] == "销售_2024.csv"
    page = browser.new_page()
    seen = watch(page)
    sign_in(page, server.url, key)
    expect(page.locator("#dataset-list .dataset")).to_contain_text("销售_2024.csv")
    page.get_by_role("checkbox", name=re.compile("销售_2024.csv")).check()
    llm.script([assistant("Nothing to compute: hello.")])
    page.get_by_label("Your question").fill("hello?")
    page.get_by_role("button", name="Ask").click()
    expect(page.locator(".run .answer-text")).to_have_text("Nothing to compute: hello.")
    title = page.locator("#conversation-title").inner_text()
    assert title.startswith("Conversation conv-")
    expect(page.locator("#conversation-data")).to_contain_text("销售_2024.csv")
    page.reload()
    expect(page.locator("#workspace")).to_be_visible()
    expect(page.locator("#conversation-title")).to_have_text(title)
    expect(page.locator(".run .answer-text")).to_have_text("Nothing to compute: hello.")
    seen.assert_clean()
