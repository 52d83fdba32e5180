"""The page draws a DataFrame an execution showed as a table, from its rich result's data.

End to end in a real browser: a scripted model runs a cell whose value is a
DataFrame with a markup cell and more columns and rows than the page keeps; the
step shows it as a table (not as the printed text), every cell as text, within
its bounds. The test watches for dialogs, console errors and failed requests.
"""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

import service_support
import web_support
from sbx.agent.core.events import MAX_TABLE_COLUMNS, MAX_TABLE_ROWS
from sbx.agent.testing.scripted_model import Reply, assistant, call
from web_support import signed_in_page

serve = service_support.serve
llm = service_support.llm
browser = web_support.browser

MARKUP = "<img src=x onerror=alert(1)>"
PROGRAM = f"""
import pandas as pd
print("before the table")
frame = pd.DataFrame({{f"c{{i}}": range(80) for i in range(30)}})
frame["c0"] = frame["c0"].astype(object)
frame.loc[0, "c0"] = {MARKUP!r}
frame
"""


@pytest.mark.docker
def test_a_dataframe_result_is_a_bounded_table_of_text(serve, llm, browser, tmp_path):
    server = serve(f"sqlite:///{tmp_path / 'data' / 'sbx.db'}")
    page, seen = signed_in_page(browser, server.url, server.key("ann"))
    llm.script([Reply(content="", tool_calls=(call("execute_python", code=PROGRAM),)),
                assistant("Done.")])
    page.get_by_label("Your question").fill("Show me the frame.")
    page.get_by_label("Your question").press("Enter")
    run = page.locator(".run").first
    expect(run.locator(".answer-text")).to_have_text("Done.")
    step = run.locator(".step").first
    table = step.locator("table.result-table")
    expect(table).to_have_count(1)
    expect(table.locator("thead th")).to_have_count(MAX_TABLE_COLUMNS)
    expect(table.locator("tbody tr")).to_have_count(MAX_TABLE_ROWS)
    expect(table.locator("tbody tr").first.locator("td").first).to_have_text(MARKUP)
    assert step.locator("img").count() == 0
    expect(step.locator(".output-stdout pre")).to_have_text("before the table\n")
    assert step.locator("table.frame:not(.result-table)").count() == 0  # not the printed text
    seen.assert_clean()
