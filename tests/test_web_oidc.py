"""Sign-in through the organization's OpenID Connect provider, in a real browser.

The provider is panva's `oidc-provider` (tests/oidc/provider.mjs) on 127.0.0.1; `sbx serve`
signs in through it with the authorization code flow and PKCE. Its development login
form takes any login: `ana` is an analyst, `admin-bo` is in the `sbx-admins` group, which
the policy maps to the admin role. Every wait is on the page (Playwright's `expect`).
"""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest
from playwright.sync_api import expect

import oidc_support
import service_support
import web_support
from oidc_support import OIDC_ENV, oidc_policy
from sbx.agent.service.web.signin_sessions import COOKIE
from web_support import watch

serve = service_support.serve
llm = service_support.llm
browser = web_support.browser
oidc_provider = oidc_support.oidc_provider


def _server_with_provider(serve: Any, oidc_provider: Any, tmp_path: Any) -> Any:
    provider = oidc_provider()
    server = serve(f"sqlite:///{tmp_path / 'data' / 'sbx.db'}",
                   policy=oidc_policy(provider.issuer), env=OIDC_ENV)
    provider.register(server.url)
    return server


def _sign_in_at_provider(page: Any, server_url: str, login: str, *, link: bool = True) -> None:
    """From the sbx page, through the provider's login and consent forms, back to the page."""
    if link:
        page.goto(server_url + "/")
        page.get_by_role("link", name="Sign in with your organization").click()
    else:  # the page hides the link while signed in; the route works all the same
        page.goto(server_url + "/web/oidc/login")
    page.locator("input[name=login]").fill(login)
    page.locator("input[name=password]").fill("any password will do")
    page.get_by_role("button", name="Sign-in").click()
    page.get_by_role("button", name="Continue").click()
    page.wait_for_url(server_url + "/")


def _status(page: Any, path: str) -> int:
    """The status of a GET the page itself makes (its session cookie goes with it)."""
    return int(page.evaluate("(path) => fetch(path).then((r) => r.status)", path))


@pytest.mark.docker
def test_the_browser_signs_in_through_the_provider_as_the_mapped_principal_and_signs_out(
    serve, llm, browser, oidc_provider, tmp_path
):
    server = _server_with_provider(serve, oidc_provider, tmp_path)
    page = browser.new_page()
    seen = watch(page)
    _sign_in_at_provider(page, server.url, "ana")

    expect(page.locator("#workspace")).to_be_visible()
    expect(page.locator("#principal")).to_have_text("oidc:ana@example.test")
    expect(page.locator("#usage dt").first).to_be_visible()  # the policy's default quotas
    seen.assert_clean()  # (the probes below log their refusals in the console)
    usage = page.evaluate("fetch('/v1/usage').then((r) => r.json())")
    assert usage["principal"] == "oidc:ana@example.test"
    assert _status(page, "/metrics") == 403  # an analyst is no admin

    page.get_by_role("button", name="Sign out").click()
    expect(page.locator("#signin")).to_be_visible()
    assert _status(page, "/v1/usage") == 401  # the session ended on the server


@pytest.mark.docker
def test_a_member_of_the_admin_group_gets_the_admin_role_in_a_rotated_session(
    serve, llm, browser, oidc_provider, tmp_path
):
    server = _server_with_provider(serve, oidc_provider, tmp_path)
    page = browser.new_page()
    web_support.sign_in(page, server.url, server.key("bo"))  # a session carried in
    carried = _session_cookie(browser)
    _sign_in_at_provider(page, server.url, "admin-bo", link=False)
    expect(page.locator("#principal")).to_have_text("oidc:admin-bo@example.test")
    assert _status(page, "/metrics") == 200
    assert _session_cookie(browser) != carried
    with httpx.Client(base_url=server.url, timeout=60) as client:
        stale = client.get("/web/session", headers={"Cookie": f"{COOKIE}={carried}"})
        assert stale.json()["signed_in"] is False  # signing in ended the carried session


def _session_cookie(context: Any) -> str:
    return next(c["value"] for c in context.cookies() if c["name"] == COOKIE)


@pytest.mark.docker
def test_a_replayed_state_is_refused_and_api_keys_still_sign_in(
    serve, llm, browser, oidc_provider, tmp_path
):
    server = _server_with_provider(serve, oidc_provider, tmp_path)
    page = browser.new_page()
    callbacks: list[str] = []
    page.on("request", lambda request: callbacks.append(request.url)
            if "/web/oidc/callback" in request.url else None)
    _sign_in_at_provider(page, server.url, "ana")
    expect(page.locator("#principal")).to_have_text("oidc:ana@example.test")
    assert len(callbacks) == 1 and parse_qs(urlsplit(callbacks[0]).query)["state"]

    answer = page.goto(callbacks[0])  # the same state, code and browser cookie, once more
    assert answer is not None and answer.status == 400
    assert "already used" in answer.json()["detail"]
    assert answer.json()["type"].endswith("oidc-state-invalid")

    with httpx.Client(base_url=server.url, timeout=60) as client:  # another browser
        fresh = client.get("/web/oidc/login")
        assert fresh.status_code == 303
        state = parse_qs(urlsplit(fresh.headers["location"]).query)["state"][0]
        stranger = httpx.get(f"{server.url}/web/oidc/callback?state={state}&code=x",
                             timeout=60)
        assert stranger.status_code == 400
        assert "another browser" in stranger.json()["detail"]

    other = browser.new_page()
    other.context.clear_cookies()
    web_support.sign_in(other, server.url, server.key("machine"))
    expect(other.locator("#principal")).to_have_text("key:machine")


@pytest.mark.docker
@pytest.mark.parametrize(("trusted_proxies", "secure"), [([], False), (["127.0.0.1"], True)])
def test_the_sign_in_cookie_is_secure_when_a_trusted_proxy_says_https_and_only_then(
    serve, oidc_provider, tmp_path, trusted_proxies, secure
):
    provider = oidc_provider()
    policy = {"service": {"trusted_proxies": trusted_proxies}, **oidc_policy(provider.issuer)}
    server = serve(f"sqlite:///{tmp_path / 'data' / 'sbx.db'}", policy=policy, env=OIDC_ENV)
    provider.register(server.url)
    said = {"X-Forwarded-Proto": "https", "X-Forwarded-For": "203.0.113.9"}  # from loopback
    answer = httpx.get(f"{server.url}/web/oidc/login", headers=said, timeout=60)
    assert answer.status_code == 303
    flags = {flag.strip() for flag in answer.headers["set-cookie"].split(";")}
    assert flags >= {"HttpOnly", "Path=/web/oidc/callback"}
    assert ("Secure" in flags) is secure
    plain = httpx.get(f"{server.url}/web/oidc/login", timeout=60)  # what the proxy did not say
    assert "Secure" not in {flag.strip() for flag in plain.headers["set-cookie"].split(";")}


@pytest.mark.docker
def test_without_oidc_the_page_shows_no_organization_link(serve, llm, browser, tmp_path):
    server = serve(f"sqlite:///{tmp_path / 'data' / 'sbx.db'}")
    page = browser.new_page()
    page.goto(server.url + "/")
    expect(page.get_by_label("API key")).to_be_visible()
    expect(page.locator("#oidc-signin")).to_be_hidden()
    with server.client() as client:
        assert client.get("/web/oidc").json() == {"enabled": False, "login_url": None}
        missing = client.get("/web/oidc/login")
        assert missing.status_code == 404
        assert "API keys only" in missing.json()["detail"]
