"""Teams on the web page: a signed-in person's team from the provider's claim, and the quota
panel showing the money spent against the key's and the team's budgets (a real browser).
"""

from __future__ import annotations

import re
from typing import Any

import pytest
from playwright.sync_api import expect
from test_service_teams import POLICY, _key
from test_web_oidc import _sign_in_at_provider

import oidc_support
import service_support
import web_support
from oidc_support import OIDC_ENV, oidc_policy
from sbx.agent.testing.scripted_model import assistant
from service_support import ask_run
from web_support import watch

serve = service_support.serve
llm = service_support.llm
browser = web_support.browser
oidc_provider = oidc_support.oidc_provider


def _row(page: Any, name: str) -> Any:
    """The quota panel's value for the row named `name`."""
    exact = re.compile(f"^{re.escape(name)}$")
    return page.locator("#usage dt").filter(has_text=exact).locator(
        "xpath=following-sibling::dd[1]")


@pytest.mark.docker
def test_the_providers_group_claim_makes_the_team_and_the_panel_shows_its_budget(
    serve, llm, browser, oidc_provider, tmp_path
):
    provider = oidc_provider()
    policy = {**oidc_policy(provider.issuer, team_claim="groups"),
              "service.teams.analysts": {"cost_per_day": 5.0}}
    server = serve(f"sqlite:///{tmp_path / 'data' / 'sbx.db'}", policy=policy, env=OIDC_ENV)
    provider.register(server.url)
    page = browser.new_page()
    seen = watch(page)
    _sign_in_at_provider(page, server.url, "ana")  # the provider puts ana in "analysts"

    expect(page.locator("#principal")).to_have_text("oidc:ana@example.test")
    expect(_row(page, "Team")).to_have_text("analysts")
    expect(_row(page, "Team analysts, money this day")).to_have_text(
        re.compile(r"^\$0\.00 spent of \$5\.00; starts again \w{3} \d{1,2}, \d\d:\d\d"))
    seen.assert_clean()
    usage = page.evaluate("fetch('/v1/usage').then((r) => r.json())")
    assert usage["team"] == "analysts"


@pytest.mark.docker
def test_the_quota_panel_shows_what_the_team_spent_of_its_budget(serve, llm, browser, tmp_path):
    server = serve(f"sqlite:///{tmp_path / 'data' / 'sbx.db'}", policy=POLICY)
    key = _key(server, "ana", team="small")
    client = server.client(key)
    conversation = client.post("/v1/conversations", json={}).json()["id"]
    llm.script([assistant("Nothing to compute.", usage=(1000, 100))])
    assert ask_run(client, conversation, "hello?")["status"] == "completed"

    page, seen = web_support.signed_in_page(browser, server.url, key)
    expect(_row(page, "Team")).to_have_text("small")
    day = _row(page, "Team small, money this day")
    expect(day).to_contain_text("€0.20 spent of €0.50; starts again ")  # cents, a local time
    expect(day).not_to_contain_text("T00:00:00Z")
    expect(_row(page, "You, money this month")).to_have_text("€0.20 spent; no cap")
    seen.assert_clean()
