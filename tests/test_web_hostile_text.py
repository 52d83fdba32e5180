"""Hostile text on the page: bidi and invisible characters shown escaped, parsers linear.

The page draws model- and code-controlled text; a bidi override must not
turn the answer `\\u202e0.14\\u202c%` into "41.0%" under a "Verified" badge,
nor stdout `report\\u202eslx.exe` into `reportexe.xls`. The table detector and
the highlighter read hostile stdout and code: their work must grow linearly
(measured against a baseline of the same total size in the same run, never
against a fixed time) and stop at their caps.
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

RLO, PDF, ZWSP = "\u202e", "\u202c", "\u200b"
CALL = {"id": "c1", "function": {"name": "execute_python",
                                 "arguments": json.dumps({"code": f"x = 1{ZWSP}\nprint(x)"})}}


@pytest.mark.docker
def test_bidi_and_invisible_characters_are_shown_escaped_everywhere(render_page):
    page = render_page
    page.evaluate("events => events.forEach((event) => window.view.handle(event))", [
        {"type": "run_start", "question": f"why{RLO}?"},
        {"type": "model_reply", "message": {"content": f"thinking{RLO}", "tool_calls": [CALL]}},
        {"type": "output_chunk", "call_id": "c1", "stream": "stdout", "text": f"live{RLO}\n"},
    ])
    expect(page.locator(".step .live")).to_have_text("live\\u202e\n")
    page.evaluate("events => events.forEach((event) => window.view.handle(event))", [
        {"type": "tool_result", "call_id": "c1", "name": "execute_python", "failed": False,
         "duration_s": 0.1, "content": "", "artifacts": [f"report{RLO}slx.exe"],
         "execution": {"stdout": f"report{RLO}slx.exe\n0.14\n", "stderr": f"w{ZWSP}\n"}},
        {"type": "run_end", "status": "completed", "answer": f"{RLO}0.14{PDF}%",
         "verified": True, "sources": [{"number": f"0.14{RLO}", "execution": 1, "line": 1,
                                        "text": f"0.14{RLO}"}], "artifacts": []},
    ])
    expect(page.locator(".answer-text")).to_have_text("\\u202e0.14\\u202c%")
    expect(page.locator(".provenance.verified")).to_be_visible()
    expect(page.locator(".output-stdout pre")).to_have_text("report\\u202eslx.exe\n0.14\n")
    expect(page.locator(".output-stderr pre")).to_have_text("w\\u200b\n")
    expect(page.locator(".question-text")).to_have_text("why\\u202e?")
    expect(page.locator(".thought")).to_have_text("thinking\\u202e")
    expect(page.locator(".step pre.code")).to_have_text("x = 1\\u200b\nprint(x)")
    expect(page.locator(".artifact-link")).to_have_text("Download report\\u202eslx.exe")
    drawn = page.evaluate("() => document.body.innerText")
    for hidden in (RLO, PDF, ZWSP):
        assert hidden not in drawn


def _timed(page, expression: str, big: str, small: str, reps: int) -> tuple[float, float]:
    """Seconds for the function `expression` on `big` once, and on `small` `reps` times."""
    return tuple(page.evaluate("""async ([expression, big, small, reps]) => {
        const { splitOutput } = await import('/static/tables.js');
        const { tokenize } = await import('/static/highlight.js');
        const run = { splitOutput, tokenize }[expression];  // the page's CSP forbids eval
        run(small);  // warm up the compiler
        let start = performance.now();
        for (let i = 0; i < reps; i += 1) run(small);
        const baseline = performance.now() - start;
        start = performance.now();
        run(big);
        return [(performance.now() - start) / 1000, baseline / 1000];
    }""", [expression, big, small, reps]))


@pytest.mark.docker
def test_the_table_detector_and_the_highlighter_are_linear_and_capped(render_page):
    page = render_page
    digits, reps = 120_000, 120

    def cells(n: int) -> str:
        row = "1" * n + "x  " + "2" * n + "x"
        return f"a  b\n{row}\n{row}\n"

    for expression, big, small in (
        ("splitOutput", cells(digits // 2), cells(digits // 2 // reps)),
        ("tokenize", "1" * digits + "x", "1" * (digits // reps) + "x"),
        ("tokenize", "x = " + "1_" * (digits // 2) + "e", "x = " + "1_" * (
            digits // 2 // reps) + "e"),
    ):
        big_s, baseline_s = _timed(page, expression, big, small, reps)
        # linear work: one big input costs about as much as `reps` small ones of the same
        # total size; the quadratic patterns cost `reps` times more than that
        assert big_s <= 20 * max(baseline_s, 0.002), (expression, big_s, baseline_s)

    capped = page.evaluate("""async () => {
        const { splitOutput } = await import('/static/tables.js');
        const { tokenize } = await import('/static/highlight.js');
        const long = "x".repeat(300000);
        const tokens = tokenize("a = 1\\n" + long);
        const parts = splitOutput("a  b\\n0  1\\n1  2\\n" + long);
        return [tokens.map((t) => t[1]).join("").length, tokens[tokens.length - 1][0],
                parts.map((p) => p.kind), parts.map((p) => p.text.length).reduce((a, b) => a + b)];
    }""")
    assert capped[0] == 300_006 and capped[1] == "plain"  # the code unchanged, its tail plain
    assert capped[2][0] == "table" and capped[2][-1] == "text"
