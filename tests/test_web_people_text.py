"""The page shows people what was written for people, in a real browser against `sbx serve`.

What the harness tells the model (a chart's description, "you cannot see them") stays
out of the page: the chart itself is shown, and the table the code printed. A plan is
shown once, as the checklist: the `update_plan` calls that carry it are not drawn as
steps with their raw JSON arguments.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from plan_support import planned_turns
from playwright.sync_api import expect

import service_support
import web_support
from sbx.agent.cli.demo import QUESTION, demo_turns
from web_support import screenshot, signed_in_page

serve = service_support.serve
llm = service_support.llm
browser = web_support.browser

SALES = Path(__file__).resolve().parents[1] / "examples" / "sales.csv"
PLAN_POLICY = {"tools.update_plan": {"enabled": True}}
FOR_THE_MODEL = re.compile(r"Note to the model|you cannot see them|this is what their files say")


@pytest.mark.docker
def test_the_page_shows_the_chart_and_one_plan_and_no_text_written_for_the_model(
    serve, llm, browser, tmp_path
):
    server = serve(f"sqlite:///{tmp_path / 'data' / 'sbx.db'}", policy=PLAN_POLICY)
    page, seen = signed_in_page(browser, server.url, server.key("ana"))
    page.get_by_label("Choose files to upload").set_input_files(str(SALES))
    expect(page.locator("#dataset-list .dataset")).to_contain_text("sales.csv")
    llm.script([*demo_turns(), *planned_turns()])

    page.get_by_label("Your question").fill(QUESTION)
    page.get_by_label("Your question").press("Enter")
    first = page.locator(".run").nth(0)
    expect(first.locator(".answer-text")).to_contain_text("South grew fastest in 2024")
    chart = first.locator("figure.chart img")
    expect(chart).to_have_attribute("src", re.compile(r"/artifacts/"))
    page.wait_for_function("img => img.complete && img.naturalWidth > 0",
                           arg=chart.element_handle())
    expect(first.locator("table.frame").first).to_be_visible()
    assert llm.requests[2].messages and FOR_THE_MODEL.search(str(llm.requests[2].messages))
    expect(first).not_to_contain_text(FOR_THE_MODEL)  # the model was told; the page shows
    chart.scroll_into_view_if_needed()
    screenshot(page, "web-answer-chart.png", tmp_path, full_page=True)

    expect(page.get_by_role("button", name="Ask")).to_be_enabled()  # the run followed to its end
    page.get_by_label("Your question").fill("What is the total?")
    page.get_by_label("Your question").press("Enter")
    second = page.locator(".run").nth(1)
    expect(second.locator(".answer-text")).to_have_text("The total is 6.")
    expect(second.get_by_role("region", name="Plan")).to_have_count(1)
    expect(second.locator(".plan h3")).to_have_text("Plan · revision 3")
    expect(second.locator(".step")).to_have_count(3)  # the three executions, no plan calls
    expect(second.locator(".step h3")).to_have_text(
        ["Step 1 · execute_python", "Step 2 · execute_python", "Step 3 · execute_python"])
    assert second.locator("pre.args").count() == 0
    expect(second).not_to_contain_text(re.compile(r"update_plan|\"steps\""))
    expect(second).not_to_contain_text(FOR_THE_MODEL)
    second.scroll_into_view_if_needed()
    screenshot(page, "web-plan.png", tmp_path, full_page=True)
    seen.assert_clean()
