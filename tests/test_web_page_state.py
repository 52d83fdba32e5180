"""The page keeps what the user sees: Cancel keeps the output, a reload keeps the conversation.

In a real browser against a real `sbx serve`: Cancel leaves the output the
user was watching on the page, says nothing about Ctrl-C or SIGTERM (the
core's message is the same for every face), and leaves no "Cancelling…"
behind; a reload opens the conversation that was open; an answer from the
server that comes back after the user opened another conversation stays out of
the one on screen; a dataset named in another script is listed by its name.
"""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

import service_support
import web_support
from sbx.agent.testing.scripted_model import assistant, tool_call
from service_support import upload
from web_support import signed_in_page, until_routed

serve = service_support.serve
llm = service_support.llm
browser = web_support.browser

CHART = ("import matplotlib\nmatplotlib.use('Agg')\nimport matplotlib.pyplot as plt\n"
         "plt.plot([1, 2, 3])\nplt.savefig('/output/图表.png')")
SLOW = "import time\nprint('tick', 6 * 7, flush=True)\ntime.sleep(120)\nprint('never')"


@pytest.mark.docker
def test_cancel_keeps_the_output_and_says_nothing_of_signals(serve, llm, browser, tmp_path):
    server = serve(f"sqlite:///{tmp_path / 'data' / 'sbx.db'}")
    page, seen = signed_in_page(browser, server.url, server.key("cleo"))
    llm.script([tool_call("execute_python", code=SLOW)])
    page.get_by_label("Your question").fill("count slowly")
    page.get_by_role("button", name="Ask").click()
    run = page.locator(".run").first
    expect(run.locator(".step .live")).to_contain_text("tick 42")
    page.get_by_label("Your question").fill("and now?")
    page.get_by_label("Your question").press("Enter")  # while the run goes: said, not sent
    expect(page.locator("#ask-status")).to_contain_text("ask again once it has ended")
    expect(page.locator(".run")).to_have_count(1)
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
def test_a_reload_opens_the_conversation_that_was_open(serve, llm, browser, tmp_path):
    server = serve(f"sqlite:///{tmp_path / 'data' / 'sbx.db'}")
    page, seen = signed_in_page(browser, server.url, server.key("dana"))
    llm.script([assistant("Nothing to compute: hello.")])
    page.get_by_label("Your question").fill("hello?")
    page.get_by_role("button", name="Ask").click()
    expect(page.locator(".run .answer-text")).to_have_text("Nothing to compute: hello.")
    title = page.locator("#conversation-title").inner_text()
    assert title.startswith("Conversation conv-")
    page.reload()
    expect(page.locator("#workspace")).to_be_visible()
    expect(page.locator("#conversation-title")).to_have_text(title)
    expect(page.locator(".run .answer-text")).to_have_text("Nothing to compute: hello.")
    page.get_by_role("button", name="New conversation").click()
    page.reload()
    expect(page.locator("#usage dt").first).to_be_visible()
    expect(page.locator("#conversation-title")).to_have_text("New conversation")
    seen.assert_clean()


@pytest.mark.docker
def test_a_conversation_opened_twice_at_once_shows_its_runs_once(serve, llm, browser, tmp_path):
    server = serve(f"sqlite:///{tmp_path / 'data' / 'sbx.db'}")
    page, seen = signed_in_page(browser, server.url, server.key("dana"))
    llm.script([assistant("First answer."), assistant("Second answer.")])
    for question in ("first?", "second?"):
        page.get_by_label("Your question").fill(question)
        page.get_by_role("button", name="Ask").click()
        expect(page.locator(".run-status").last).to_contain_text("completed")
    # the run followed to its end: the old page's own read of it is not on its way
    expect(page.get_by_role("button", name="Ask")).to_be_enabled()
    held: list = []  # the reload's reads of a run, answered only once the click reopened it

    def hold_the_first_openings_reads(route) -> None:
        if route.request.method == "GET" and not held and not route.request.url.endswith(
                "/events"):
            held.append(route)
        else:
            route.continue_()

    run_read = re.compile(r".*/v1/runs/run-[0-9a-f]+$")
    page.route(run_read, hold_the_first_openings_reads)
    with page.expect_request(lambda request: bool(run_read.match(request.url))):
        page.reload()  # opens the conversation in the address, and waits on its first run
    until_routed(page, held)
    expect(page.locator(".run")).to_have_count(0)
    page.locator("#conversation-list button").first.click()  # opened again meanwhile
    expect(page.locator(".run .answer-text")).to_have_count(2)
    late = held[0].request.url
    with page.expect_response(lambda response: response.url == late):
        held[0].continue_()  # the first opening's read comes back late
    page.evaluate("() => new Promise((done) => setTimeout(done, 0))")  # and is handled
    expect(page.locator(".run")).to_have_count(2)
    expect(page.locator(".run .answer-text")).to_have_text(["First answer.", "Second answer."])
    expect(page.locator(".run-status", has_text="Queued")).to_have_count(0)
    seen.assert_clean()


@pytest.mark.docker
def test_a_question_accepted_after_the_user_moved_on_stays_in_its_conversation(
    serve, llm, browser, tmp_path
):
    server = serve(f"sqlite:///{tmp_path / 'data' / 'sbx.db'}")
    page, seen = signed_in_page(browser, server.url, server.key("dana"))
    llm.script([assistant("First answer."), assistant("Second answer.")])
    page.get_by_label("Your question").fill("first?")
    page.get_by_role("button", name="Ask").click()
    expect(page.locator(".run-status").last).to_contain_text("completed")
    expect(page.get_by_role("button", name="Ask")).to_be_enabled()  # the run followed to its end
    held: list = []  # the second question's POST, answered only once the user moved on
    page.route(re.compile(r".*/questions$"), lambda route: held.append(route))
    with page.expect_request(re.compile(r".*/questions$")):
        page.get_by_label("Your question").fill("second?")
        page.get_by_label("Your question").press("Enter")
        page.get_by_label("Your question").press("Enter")  # pressed twice: sent once
    until_routed(page, held)
    page.get_by_role("button", name="New conversation").click()
    expect(page.locator(".run")).to_have_count(0)
    page.get_by_label("Your question").fill("a third, not sent yet")
    with page.expect_request(lambda request: request.method == "GET"
                             and request.url.endswith("/v1/conversations")):
        held[0].continue_()  # the question is accepted now: the page lists its conversation
    expect(page.locator(".run")).to_have_count(0)
    expect(page.locator("#conversation-title")).to_have_text("New conversation")
    expect(page.get_by_label("Your question")).to_have_value("a third, not sent yet")
    page.locator("#conversation-list button").first.click()
    expect(page.locator(".run .answer-text")).to_have_text(["First answer.", "Second answer."])
    assert len(held) == 1
    seen.assert_clean()


@pytest.mark.docker
def test_a_dataset_named_in_another_script_is_listed_and_used_by_its_name(
    serve, llm, browser, tmp_path
):
    server = serve(f"sqlite:///{tmp_path / 'data' / 'sbx.db'}")
    key = server.key("emil")
    dataset = upload(server.client(key), "销售 2024.csv", b"region,revenue\nNorth,10\n").json()
    assert dataset["name"] == "销售_2024.csv"  # the space is not a letter; the rest stays
    assert dataset["preview"].startswith("- /data/销售_2024.csv")
    page, seen = signed_in_page(browser, server.url, key)
    expect(page.locator("#dataset-list .dataset")).to_contain_text("销售_2024.csv")
    page.get_by_role("checkbox", name=re.compile("销售_2024.csv")).check()
    llm.script([tool_call("execute_python", code="import pandas as pd\n"
                          "print(pd.read_csv('/data/销售_2024.csv').revenue.sum())"),
                assistant("The revenue is 10.")])
    page.get_by_label("Your question").fill("total?")
    page.get_by_role("button", name="Ask").click()
    expect(page.locator(".run .answer-text")).to_have_text("The revenue is 10.")
    expect(page.locator(".step .output-stdout pre")).to_have_text("10")
    expect(page.locator("#conversation-data")).to_contain_text("销售_2024.csv")
    seen.assert_clean()


@pytest.mark.docker
def test_a_chart_named_in_another_script_is_drawn_and_downloads(serve, llm, browser, tmp_path):
    server = serve(f"sqlite:///{tmp_path / 'data' / 'sbx.db'}")
    page, seen = signed_in_page(browser, server.url, server.key("finn"))
    llm.script([tool_call("execute_python", code=CHART), assistant("Drawn.")])
    page.get_by_label("Your question").fill("draw")
    page.get_by_role("button", name="Ask").click()
    expect(page.locator(".run .answer-text")).to_have_text("Drawn.")
    chart = page.locator(".step .chart img")
    expect(chart).to_have_attribute("src", re.compile(r"/artifacts/%E5%9B%BE%E8%A1%A8\.png$"))
    page.wait_for_function("img => img.complete && img.naturalWidth > 0",
                           arg=chart.element_handle())
    with page.expect_download() as info:
        page.locator(".step .chart a.artifact-link").click()
    assert info.value.suggested_filename == "图表.png"
    seen.assert_clean()
