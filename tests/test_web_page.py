"""Acceptance 1, 2 and 4 of the web page, in a real browser against a real `sbx serve`.

Debian's chromium driven by Playwright; the scripted model plays `sbx demo`'s
turns (a program that fails, its fix, a chart, an answer quoting the output)
and a follow-up that uses a variable of the first run. Every wait is on the
page's own state (Playwright's `expect`), never a sleep.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import nbformat
import pytest
from playwright.sync_api import expect

import service_support
import web_support
from sbx.agent.cli.demo import QUESTION, demo_turns
from sbx.agent.testing.scripted_model import assistant, tool_call
from web_support import PHONE, screenshot, sign_in, watch

serve = service_support.serve
llm = service_support.llm
browser = web_support.browser

SALES = Path(__file__).resolve().parents[1] / "examples" / "sales.csv"
FOLLOW_UP = "And by how much did it grow, in percent?"
FOLLOW_UP_CODE = "print(round(by_year.loc[top, 'growth_%'], 1))"  # `by_year`, `top`: run 1's


def _download(page, link) -> Path:
    with page.expect_download() as info:
        link.click()
    path = info.value.path()
    assert path is not None, info.value.failure()
    return Path(path)


@pytest.mark.docker
def test_an_analyst_uploads_asks_sees_the_fix_and_the_chart_then_follows_up_and_downloads(
    serve, llm, browser, tmp_path
):
    server = serve(f"sqlite:///{tmp_path / 'data' / 'sbx.db'}")
    page = browser.new_page()
    seen = watch(page)
    page.goto(server.url + "/")
    expect(page.get_by_label("API key")).to_be_focused()
    screenshot(page, "web-sign-in.png", tmp_path)
    sign_in(page, server.url, server.key("ana"))

    page.get_by_label("Choose files to upload").set_input_files(str(SALES))
    expect(page.locator("#dataset-list .dataset")).to_contain_text("sales.csv")
    expect(page.get_by_role("checkbox", name=re.compile("sales.csv"))).to_be_checked()
    page.get_by_role("button", name="Preview sales.csv").click()
    expect(page.locator("#preview-text")).to_contain_text("columns: period (text), year (int)")

    llm.script([
        *demo_turns(),
        tool_call("execute_python", code=FOLLOW_UP_CODE),
        assistant("Revenue in the South grew by 41.0% from 2023 to 2024."),
    ])
    page.get_by_label("Your question").fill(QUESTION)
    page.get_by_label("Your question").press("Enter")

    first = page.locator(".run").nth(0)
    expect(first.locator(".answer-text")).to_contain_text("South grew fastest in 2024")
    steps = first.locator(".step")
    expect(steps).to_have_count(2)
    expect(steps.nth(0)).to_have_class(re.compile(r"\bfailed\b"))
    expect(steps.nth(0).locator(".error-headline")).to_have_text(
        "AttributeError: 'list' object has no attribute 'mean'")
    expect(steps.nth(0).locator(".tok-keyword").first).to_have_text("import")
    expect(steps.nth(1)).to_have_class(re.compile(r"\bsucceeded\b"))
    table = steps.nth(1).locator("table.frame")
    expect(table.locator("thead th")).to_have_text(["region", "2023", "2024", "growth_%"])
    expect(table.locator("tbody th").first).to_have_text("South")
    expect(steps.nth(1).locator(".resources")).to_contain_text("peak memory")
    expect(steps.nth(1).locator(".notes")).to_contain_text("artifacts saved: growth_by_region.png")
    chart = steps.nth(1).locator(".chart img")
    expect(chart).to_be_visible()
    page.wait_for_function("img => img.complete && img.naturalWidth > 0",
                           arg=chart.element_handle())
    assert chart.evaluate("img => img.naturalWidth") > 0
    expect(first.locator(".provenance.verified")).to_be_visible()
    expect(first.locator(".sources summary")).to_contain_text("Sources (")
    expect(first.locator(".run-status")).to_contain_text("completed")
    screenshot(page, "web-answer.png", tmp_path, full_page=True)

    page.get_by_label("Your question").fill(FOLLOW_UP)
    page.get_by_role("button", name="Ask").click()
    second = page.locator(".run").nth(1)
    expect(second.locator(".answer-text")).to_have_text(
        "Revenue in the South grew by 41.0% from 2023 to 2024.")
    expect(second.locator(".step .output-stdout pre")).to_have_text("41.0")
    client = server.client()
    client.cookies.update(dict(_cookies(browser)))
    conversations = client.get("/v1/conversations").json()["items"]
    assert len(conversations) == 1
    assert len(client.get(f"/v1/conversations/{conversations[0]['id']}").json()["runs"]) == 2

    png = _download(page, steps.nth(1).locator(".chart a.artifact-link"))
    assert png.read_bytes().startswith(b"\x89PNG\r\n\x1a\n")
    notebook = nbformat.read(_download(page, page.get_by_role("link", name="Notebook (.ipynb)")),
                             as_version=4)
    nbformat.validate(notebook)
    sources = "\n".join(cell.source for cell in notebook.cells)
    assert QUESTION in sources and FOLLOW_UP in sources and FOLLOW_UP_CODE in sources
    transcript = _download(page, page.get_by_role("link", name="Transcript (.jsonl)"))
    events = [json.loads(line) for line in transcript.read_text().splitlines()]
    assert [e["status"] for e in events if e["type"] == "run_end"] == ["completed", "completed"]
    assert str(server.data_dir) not in transcript.read_text()  # no host paths

    page.reload()  # the session cookie survives; the conversation is read back from its events
    expect(page.locator("#workspace")).to_be_visible()
    page.locator("#conversation-list button").first.click()
    expect(page.locator(".run")).to_have_count(2)
    expect(page.locator(".run .answer-text").nth(1)).to_have_text(
        "Revenue in the South grew by 41.0% from 2023 to 2024.")
    replayed = page.locator(".run").nth(0).locator(".chart img")
    page.wait_for_function("img => img.complete && img.naturalWidth > 0",
                           arg=replayed.element_handle())
    second = page.locator(".run").nth(1)

    page.set_viewport_size(PHONE)
    second.evaluate("node => node.scrollIntoView({block: 'start'})")
    assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
    screenshot(page, "web-phone.png", tmp_path)
    page.get_by_role("button", name="Sign out").click()
    expect(page.get_by_label("API key")).to_be_visible()
    seen.assert_clean()


def _cookies(context):
    return [(cookie["name"], cookie["value"]) for cookie in context.cookies()]
