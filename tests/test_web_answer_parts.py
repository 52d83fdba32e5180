"""The answer's parts on the service: the run resource, the export, and the page.

A real `sbx serve`, real Docker, the real SDK against the scripted model; the
page in Debian's chromium driven by Playwright, every wait on the page's state.
"""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

import service_support
import web_support
from sbx.agent.testing.scripted_model import assistant, tool_call
from service_support import stream, upload
from web_support import signed_in_page

serve = service_support.serve
llm = service_support.llm
browser = web_support.browser

PROGRAM = "print('South growth %', 12.4)"
ANSWER = (
    "South grew fastest.\n\n"
    "Measured:\n- South grew 12.4%.\n\n"
    "Interpretation:\n- The new store probably drove it.\n\n"
    "Assumptions:\n- Revenue is in euros.\n"
)


@pytest.mark.docker
def test_the_run_resource_the_export_and_the_page_show_measured_apart_from_interpretation(
    serve, llm, browser, tmp_path
):
    server = serve(f"sqlite:///{tmp_path / 'data' / 'sbx.db'}")
    key = server.key("ana")
    ana = server.client(key)
    dataset = upload(ana, "sales.csv", b"region,revenue\nSouth,1\n")
    assert dataset.status_code == 201, dataset.text
    created = ana.post("/v1/conversations", json={"datasets": [dataset.json()["id"]]})
    conversation = created.json()["id"]
    llm.script([tool_call("execute_python", code=PROGRAM), assistant(ANSWER)])
    asked = ana.post(f"/v1/conversations/{conversation}/questions",
                     json={"question": "Which region grew fastest?"})
    run_id = asked.json()["run_id"]
    assert stream(ana, run_id)[-1]["data"]["parts"]["interpretation"] == (
        "- The new store probably drove it.")

    run = ana.get(f"/v1/runs/{run_id}").json()
    assert run["parts"] == {"measured": "South grew fastest.\n\n- South grew 12.4%.",
                            "interpretation": "- The new store probably drove it.",
                            "assumptions": "- Revenue is in euros.", "unmarked": ""}
    assert run["mislabelled"] == []
    report = ana.get(f"/v1/conversations/{conversation}/export", params={"format": "md"})
    assert report.status_code == 200, report.text
    assert "#### Measured\n\nSouth grew fastest." in report.text
    assert "#### Assumptions\n\n- Revenue is in euros." in report.text

    page, seen = signed_in_page(browser, server.url, key)
    llm.script([tool_call("execute_python", code=PROGRAM), assistant(ANSWER)])
    page.get_by_label("Your question").fill("Which region grew fastest?")
    page.get_by_label("Your question").press("Enter")
    answer = page.locator(".run .answer").last
    expect(answer.get_by_role("region", name="Measured")).to_contain_text("South grew 12.4%.")
    expect(answer.get_by_role("region", name="Interpretation")).to_contain_text(
        "The new store probably drove it.")
    expect(answer.get_by_role("region", name="Assumptions")).to_contain_text(
        "Revenue is in euros.")
    expect(answer.get_by_role("region", name="Measured")).not_to_contain_text("probably")
    expect(answer.locator(".provenance.verified")).to_be_visible()
    seen.assert_clean()
