"""The web page from the keyboard: sign in, ask with Enter, cancel, and Tab reaches every control.

Also: every form control has a label and every button and link a name, and a
run can be cancelled from the page (its sandbox is removed, the run ends
`cancelled`). A real browser against a real `sbx serve`; waits are on the page.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from playwright.sync_api import expect

import service_support
import web_support
from sbx.agent.testing.scripted_model import assistant, tool_call
from web_support import watch

serve = service_support.serve
llm = service_support.llm
browser = web_support.browser

SALES = Path(__file__).resolve().parents[1] / "examples" / "sales.csv"
DROP = """() => {
    const files = new DataTransfer();
    files.items.add(new File(['a,b\\n1,2\\n'], 'dropped.csv', { type: 'text/csv' }));
    return files;
}"""
SLOW = "print('started', flush=True)\nimport time\ntime.sleep(300)\n"

MARK_CONTROLS = """() => {
    const selector = 'a[href], button, input, textarea, select, summary, [tabindex]';
    const controls = [...document.querySelectorAll(selector)].filter((node) =>
        !node.disabled && node.tabIndex >= 0 && node.getClientRects().length > 0);
    controls.forEach((node, index) => { node.dataset.kbd = String(index); });
    return controls.map((node) =>
        node.tagName.toLowerCase() + '#' + (node.id || node.textContent.trim().slice(0, 30)));
}"""
UNNAMED = """() => [...document.querySelectorAll('input, textarea, select, button, a[href]')]
    .filter((node) => node.getClientRects().length > 0)
    .filter((node) => {
        if (['input', 'textarea', 'select'].includes(node.tagName.toLowerCase())) {
            return node.labels.length === 0 && !node.getAttribute('aria-label');
        }
        return !(node.getAttribute('aria-label') || node.textContent.trim());
    })
    .map((node) => node.outerHTML.slice(0, 120))"""


@pytest.mark.docker
def test_everything_is_reachable_and_usable_from_the_keyboard(serve, llm, browser, tmp_path):
    server = serve(f"sqlite:///{tmp_path / 'data' / 'sbx.db'}")
    page = browser.new_page()
    seen = watch(page)
    page.goto(server.url + "/")
    expect(page.get_by_label("API key")).to_be_focused()
    page.keyboard.type(server.key("kim"))
    page.keyboard.press("Enter")
    expect(page.get_by_label("Your question")).to_be_focused()
    page.get_by_label("Choose files to upload").set_input_files(str(SALES))
    expect(page.locator("#dataset-list .dataset")).to_have_count(1)
    dropped = page.evaluate_handle(DROP)
    page.dispatch_event("#dropzone", "drop", {"dataTransfer": dropped})
    expect(page.locator("#dataset-list .dataset")).to_have_count(2)
    expect(page.locator("#data-status")).to_have_text("Uploaded dropped.csv (8 B).")

    llm.script([tool_call("execute_python", code="print(6 * 7)"), assistant("It is 42."),
                tool_call("execute_python", code=SLOW)])
    question = page.get_by_label("Your question")
    question.focus()
    page.keyboard.type("first line")
    page.keyboard.press("Shift+Enter")  # a new line, not a question
    page.keyboard.type("What is 6 times 7?")
    expect(question).to_have_value("first line\nWhat is 6 times 7?")
    expect(page.locator(".run")).to_have_count(0)
    page.keyboard.press("Enter")
    expect(page.locator(".run .answer-text")).to_have_text("It is 42.")
    expect(page.locator(".run .question-text")).to_have_text("first line\nWhat is 6 times 7?")
    expect(page.get_by_role("button", name="Ask")).to_be_enabled()

    page.locator(".sources summary").focus()  # open the sources from the keyboard
    page.keyboard.press("Enter")
    expect(page.locator(".sources li")).to_have_count(1)
    page.get_by_role("button", name="Preview sales.csv").focus()
    page.keyboard.press("Enter")
    expect(page.locator("#preview-text")).to_be_focused()

    controls = page.evaluate(MARK_CONTROLS)
    assert len(controls) >= 15, controls
    assert page.evaluate(UNNAMED) == []
    reached: list[int] = []
    for _ in range(2 * len(controls) + 10):  # one full cycle of Tab, wherever it starts
        page.keyboard.press("Tab")
        mark = page.evaluate("document.activeElement && document.activeElement.dataset.kbd")
        if mark is None:
            continue  # the document itself, between the last control and the first
        if reached and int(mark) == reached[0]:
            break
        reached.append(int(mark))
    missed = [controls[index] for index in range(len(controls)) if index not in reached]
    assert missed == [], f"Tab never reached {missed}"
    start = reached.index(min(reached))
    assert reached[start:] + reached[:start] == sorted(reached)  # in reading order

    question.focus()
    page.keyboard.type("Now something slow")
    page.keyboard.press("Enter")
    slow = page.locator(".run").nth(1)
    expect(slow.locator(".step.running")).to_be_visible()
    cancel = page.get_by_role("button", name="Cancel run")
    expect(cancel).to_be_visible()
    cancel.focus()
    page.keyboard.press("Enter")
    expect(slow.locator(".run-status")).to_contain_text("cancelled")
    expect(cancel).to_be_hidden()
    seen.assert_clean()
