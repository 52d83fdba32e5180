"""While the model thinks, the page says so: which model and for how long, in a real browser.

The scripted model holds its reply until the test has seen the waiting line, so nothing here
depends on a sleep; once the reply comes, the line gives way to the run's own status.
"""

from __future__ import annotations

import re
import threading

import pytest
from playwright.sync_api import expect

import service_support
import web_support
from sbx.agent.testing.scripted_model import assistant
from scripted_llm import held_back
from web_support import signed_in_page

serve = service_support.serve
llm = service_support.llm
browser = web_support.browser


@pytest.mark.docker
def test_a_slow_model_shows_a_waiting_line_that_gives_way_to_the_answer(
    serve, llm, browser, tmp_path
):
    server = serve(f"sqlite:///{tmp_path / 'data' / 'sbx.db'}")
    page, seen = signed_in_page(browser, server.url, server.key("ana"))
    release = threading.Event()
    llm.script([held_back(release, assistant("Nothing needed computing."))])

    try:
        page.get_by_label("Your question").fill("Anything to compute?")
        page.get_by_label("Your question").press("Enter")
        status = page.locator(".run").nth(0).locator(".run-status")
        expect(status).to_have_text(re.compile(r"^Waiting for the model \(scripted\): \d+ s…$"))
    finally:
        release.set()

    expect(page.locator(".run").nth(0)).to_contain_text("Nothing needed computing.")
    expect(status).not_to_contain_text("Waiting for the model")
    seen.assert_clean()
