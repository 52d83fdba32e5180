"""The page's notes panel: see, add, edit and delete the notes on a dataset.

A real `sbx serve` and Debian's chromium driven by Playwright; every wait is on
the page's own state. A note's text is model- or person-written: shown as text.
"""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

import service_support
import web_support
from service_support import upload
from web_support import signed_in_page

serve = service_support.serve
llm = service_support.llm
browser = web_support.browser

MARKUP = "<img src=x onerror=alert(1)> amounts are in cents"


@pytest.mark.docker
def test_an_analyst_adds_edits_and_deletes_notes_and_sees_a_stale_one(
    serve, llm, browser, tmp_path
):
    server = serve(f"sqlite:///{tmp_path / 'data' / 'sbx.db'}")
    key = server.key("ana")
    ana = server.client(key)
    old = upload(ana, "sales.csv", b"region,amount\nNorth,1\n").json()["id"]
    assert ana.post(f"/v1/datasets/{old}/notes", json={"text": "region 9 is a test region"}
                    ).status_code == 201
    assert ana.delete(f"/v1/datasets/{old}").status_code == 204
    new = upload(ana, "sales.csv", b"region,amount\nNorth,2\n").json()["id"]

    page, seen = signed_in_page(browser, server.url, key)
    page.get_by_role("button", name="Notes on sales.csv").click()
    panel = page.get_by_role("region", name="Notes on sales.csv")
    stale = panel.locator(".note").filter(has_text="region 9 is a test region")
    expect(stale.locator(".note-stale")).to_have_text("Possibly stale: the file changed since.")

    panel.get_by_label("New note").fill(MARKUP)
    panel.get_by_role("button", name="Add note").click()
    added = panel.locator(".note").filter(has_text="amounts are in cents")
    expect(added.locator(".note-text")).to_have_text(MARKUP)
    expect(added.locator(".meta")).to_contain_text("key:ana")
    assert page.locator("img").count() == 0
    note_id = added.get_attribute("data-note")

    panel.get_by_role("button", name=f"Edit note {note_id}").click()
    panel.get_by_label(f"New text of note {note_id}").fill("amounts are in euro cents")
    panel.get_by_role("button", name="Save note").click()
    expect(panel.locator(f'[data-note="{note_id}"] .note-text')).to_have_text(
        "amounts are in euro cents")
    texts = [n["text"] for n in ana.get(f"/v1/datasets/{new}/notes").json()["items"]]
    assert texts == ["region 9 is a test region", "amounts are in euro cents"]

    panel.get_by_role("button", name=f"Delete note {note_id}").click()
    expect(panel.locator(f'[data-note="{note_id}"]')).to_have_count(0)
    texts = [n["text"] for n in ana.get(f"/v1/datasets/{new}/notes").json()["items"]]
    assert texts == ["region 9 is a test region"]
    seen.assert_clean()
