"""The page's renderer in a real browser, fed events directly: live output, tables, highlighting.

`output_chunk` events (an execution's stdout and stderr while it runs) are
drawn as they come and replaced by the step's kept output when its
`tool_result` arrives; an event type the page does not know is ignored.
DataFrame text becomes a table and prose stays text; the highlighter gives
back the code unchanged. The modules are the ones `sbx serve` ships.
"""

from __future__ import annotations

import json

import pytest
from playwright.sync_api import expect

import service_support
import web_support

serve = service_support.serve
llm = service_support.llm
browser = web_support.browser
render_page = web_support.render_page

CALL = {"id": "c1", "function": {"name": "execute_python",
                                 "arguments": json.dumps({"code": "print(1)"})}}
FRAME = "    a    b\n0  1.5  x y\n1  2.0  z\nDone: <b>2</b> rows\n"
CODE = ('@cache\ndef f(x="#not a comment", *a):  # a \'comment\' with "quotes"\n'
        '    return f"""{x}\n')


@pytest.mark.docker
def test_live_output_is_drawn_as_it_comes_then_replaced_by_the_kept_output(render_page):
    page = render_page
    feed = "events => events.forEach((event) => window.view.handle(event))"
    page.evaluate(feed, [
        {"type": "model_reply", "message": {"tool_calls": [CALL]}},
        {"type": "output_chunk", "call_id": "c1", "stream": "stdout", "text": "<i>1</i>\n"},
        {"type": "output_chunk", "call_id": "c1", "stream": "stderr", "text": "warn\n"},
        {"type": "a_future_event", "call_id": "c1", "text": "ignored"},
    ])
    live = page.locator(".step .live")
    expect(live).to_have_text("<i>1</i>\nwarn\n")
    expect(live.locator(".live-stderr")).to_have_text("warn\n")
    assert page.locator(".step i").count() == 0
    page.evaluate(feed, [{"type": "tool_result", "call_id": "c1", "name": "execute_python",
                          "failed": False, "duration_s": 0.5, "content": "[resources] 0.5 s wall",
                          "artifacts": [], "execution": {"stdout": FRAME, "stderr": ""}}])
    expect(live).to_be_hidden()
    expect(page.locator(".step .resources")).to_have_text("Resources: 0.5 s wall")
    table = page.locator(".step table.frame")
    expect(table.locator("thead th")).to_have_text(["", "a", "b"])
    expect(table.locator("tbody tr").nth(0).locator("th, td")).to_have_text(["0", "1.5", "x y"])
    expect(page.locator(".step .output-stdout pre")).to_have_text("Done: <b>2</b> rows")


@pytest.mark.docker
def test_the_highlighter_keeps_the_code_and_marks_its_parts(render_page):
    page = render_page
    tokens = page.evaluate("""async (code) => {
        const { tokenize } = await import('/static/highlight.js');
        return tokenize(code);
    }""", CODE)
    assert "".join(text for _, text in tokens) == CODE
    kinds = {text: kind for kind, text in tokens}
    assert kinds["@cache"] == "decorator" and kinds["def"] == "keyword" and kinds["f"] == "def"
    assert kinds['"#not a comment"'] == "string"
    assert kinds["# a 'comment' with \"quotes\""] == "comment"
    assert kinds['f"""{x}\n'] == "string"  # an unterminated string runs to the end
    prose = page.evaluate("""async (text) => {
        const { splitOutput } = await import('/static/tables.js');
        return splitOutput(text).map((part) => part.kind);
    }""", "Two  spaces  here\nand  there  too\nbut no numbers\n")
    assert prose == ["text"]


MARKDOWN = (
    "## Result\n\nRevenue grew **41.0%** in *2024*, see `df.sum()`.\n\n"
    "- North: 10\n- South: 12\n\n1. first\n2. second\n\n"
    "```python\nprint('<b>x</b>')\n```\n"
    "<script>window.injected = 1</script><img src=x onerror=\"window.injected=2\"> "
    "[click](javascript:evil)"
)


@pytest.mark.docker
def test_the_answer_markdown_is_drawn_as_a_safe_subset(render_page):
    page = render_page
    page.evaluate("event => window.view.handle(event)", {
        "type": "run_end", "status": "completed", "answer": MARKDOWN, "verified": True,
        "sources": [], "unsupported": [], "message": "The model answered."})
    answer = page.locator(".answer .markdown")
    expect(answer.locator("h5")).to_have_text("Result")
    expect(answer.locator("strong")).to_have_text("41.0%")
    expect(answer.locator("em")).to_have_text("2024")
    expect(answer.locator("p code").first).to_have_text("df.sum()")
    expect(answer.locator("ul li")).to_have_text(["North: 10", "South: 12"])
    expect(answer.locator("ol li")).to_have_text(["first", "second"])
    expect(answer.locator("pre.md-code code")).to_have_text("print('<b>x</b>')")
    expect(answer).to_contain_text("<script>window.injected = 1</script><img src=x")
    assert answer.locator("script, img, a, b").count() == 0  # raw HTML stays text
    expect(answer.locator(".md-link")).to_have_text("click (javascript:evil)")
    assert page.evaluate("window.injected === undefined")
    assert page.locator(".answer .provenance").count() == 0  # no number checked: no "Verified"


@pytest.mark.docker
def test_a_restored_state_is_one_escaped_line_saying_what_came_back_and_what_differs(
    render_page
):
    page = render_page
    feed = "events => events.forEach((event) => window.view.handle(event))"
    page.evaluate(feed, [
        {"type": "run_start", "question": "q?", "sandbox_reset": True},
        {"type": "state_restored", "status": "partial", "cells": 3, "replayed": 3,
         "reason": "an idle release", "variables": ["<img src=x onerror=alert(1)>", "luck"],
         "differed": [{"call_id": "call_2", "detail": "line 1: 0.1 recorded, <b>0.7</b> now",
                       "variables": ["luck"]}], "failed": []},
    ])
    line = page.locator(".steps li.note.restored")
    expect(line).to_contain_text("state restored: restored 3 cells (an idle release). "
                                 "1 differs, 0 could not be restored.")
    expect(line).to_contain_text("These variables may differ: <img src=x onerror=alert(1)>, luck.")
    expect(line.locator(".restored-cells li")).to_have_text(
        ["call_2: line 1: 0.1 recorded, <b>0.7</b> now"])
    assert page.locator(".steps img, .steps b").count() == 0  # text, never markup
    expect(page.locator(".steps li.note")).to_have_count(1)  # the "gone" note was replaced
    page.evaluate(feed, [{"type": "state_restored", "status": "restored", "cells": 1,
                          "replayed": 1, "reason": "a timeout"}])
    expect(page.locator(".steps li.note.restored").nth(1)).to_have_text(
        "The sandbox was started again; state restored: restored 1 cell (a timeout).")
    page.evaluate(feed, [{"type": "state_restored", "status": "restored", "cells": 1,
                          "replayed": 1, "from_snapshot": 9, "reason": "an idle release"}])
    expect(page.locator(".steps li.note.restored").nth(2)).to_have_text(
        "The sandbox was started again; state restored: restored 9 cells from a snapshot "
        "and re-ran 1 (an idle release).")


@pytest.mark.docker
def test_a_steps_notes_name_the_policys_setting_and_no_command_line_flag(render_page):
    page = render_page
    notes = ("[notes]\n- timed out: the execution passed the 5 s wall-clock limit and was killed; "
             "variables were reset (limit: `timeout` in the policy's [sandbox] table, or "
             "--timeout)\n[resources] 5.0 s wall")
    page.evaluate("events => events.forEach((event) => window.view.handle(event))", [
        {"type": "model_reply", "message": {"tool_calls": [CALL]}},
        {"type": "tool_result", "call_id": "c1", "name": "execute_python", "failed": True,
         "content": notes, "artifacts": [], "execution": {"stdout": "", "timed_out": True}},
        {"type": "tool_result", "call_id": "c2", "name": "execute_python", "failed": True,
         "content": "the run's time budget (max_wall_time, --max-time) ran out while this code "
                    "ran (--max-time)", "artifacts": []},
    ])
    expect(page.locator(".step .notes li")).to_have_text(
        "timed out: the execution passed the 5 s wall-clock limit and was killed; variables "
        "were reset (limit: `timeout` in the policy's [sandbox] table)")
    expect(page.locator(".step").nth(1).locator(".outcome pre")).to_have_text(
        "the run's time budget (max_wall_time) ran out while this code ran")
