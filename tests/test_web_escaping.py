"""Acceptance 3 of the web page: hostile names and output are shown as text, and nothing runs.

A CSV whose column is named `<img src=x onerror=alert(1)>`, uploaded under a
file name that is markup too; a program that prints `<script>` tags to stdout
and markup to stderr, saves a file whose name is markup and raises an error
whose message is markup; a model whose reply and answer hold markup. The test
watches for dialogs, console errors (a CSP violation is one), uncaught errors
and failed requests, and checks that every piece is shown literally.
"""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

import service_support
import web_support
from sbx.agent.testing.scripted_model import Reply, assistant, call
from web_support import signed_in_page

serve = service_support.serve
llm = service_support.llm
browser = web_support.browser

COLUMN = "<img src=x onerror=alert(1)>"
UPLOAD_NAME = "<img src=x onerror=alert(2)>.csv"
STDOUT = "<script>alert('stdout')</script>"
STDERR = "<svg onload=alert('stderr')></svg>"
ARTIFACT = "<img src=x onerror=alert(4)>.txt"
ERROR = "<script>alert('error')</script>"
THOUGHT = '<iframe src="javascript:alert(5)"></iframe> let me look'
ANSWER = "<b>bold?</b> <script>alert('answer')</script> The column is " + COLUMN
QUESTION = "<img src=x onerror=alert(6)> what is in the file?"
PROGRAM = f"""
import glob, sys
import pandas as pd
df = pd.read_csv(glob.glob("/data/*.csv")[0])
print(df.to_string())
print({STDOUT!r})
print({STDERR!r}, file=sys.stderr)
open("/output/" + {ARTIFACT!r}, "w").write("<script>alert('file')</script>")
raise ValueError({ERROR!r})
"""


@pytest.mark.docker
def test_markup_in_names_output_and_answers_is_shown_as_text_and_never_runs(
    serve, llm, browser, tmp_path
):
    server = serve(f"sqlite:///{tmp_path / 'data' / 'sbx.db'}")
    page, seen = signed_in_page(browser, server.url, server.key("mallory"))
    csv = tmp_path / "upload" / UPLOAD_NAME
    csv.parent.mkdir()
    csv.write_text(f"region,{COLUMN}\nNorth,1\nSouth,2\n")
    page.get_by_label("Choose files to upload").set_input_files(str(csv))
    expect(page.locator("#dataset-list .dataset")).to_have_count(1)
    page.locator("#dataset-list .dataset button", has_text="Preview").click()
    expect(page.locator("#preview-text")).to_contain_text(COLUMN)

    llm.script([
        Reply(content=THOUGHT, tool_calls=(call("execute_python", code=PROGRAM),)),
        assistant(ANSWER),
    ])
    page.get_by_label("Your question").fill(QUESTION)
    page.get_by_label("Your question").press("Enter")
    run = page.locator(".run").first
    expect(run.locator(".answer-text")).to_have_text(ANSWER)

    expect(run.locator(".question-text")).to_have_text(QUESTION)
    expect(run.locator(".thought")).to_have_text(THOUGHT)
    step = run.locator(".step").first
    expect(step).to_have_class(re.compile(r"\bfailed\b"))
    expect(step.locator(".output-stdout")).to_contain_text(COLUMN)
    expect(step.locator(".output-stdout")).to_contain_text(STDOUT)
    expect(step.locator(".output-stderr")).to_contain_text(STDERR)
    expect(step.locator(".error-headline")).to_have_text(f"ValueError: {ERROR}")
    expect(step.locator(".artifact-link")).to_have_text(f"Download {ARTIFACT}")
    expect(step.locator(".artifact-link")).to_have_attribute("href", re.compile("^/v1/runs/"))
    expect(step.locator("pre.code")).to_contain_text(STDOUT)

    # Nothing of theirs became an element: only the page's own script, no images, no frames.
    own = page.locator("script[type=module][src^='/static/']").count()
    assert own == 2 and page.locator("script").count() == own  # app.js and oidc.js
    assert page.locator("img, iframe, svg, b").count() == 0
    assert page.evaluate("document.body.innerHTML.includes('<script>alert')") is False
    seen.assert_clean()
