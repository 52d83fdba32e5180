"""The web page's controls: the session cookie, forgery checks, the CSP, the headers.

    cookie     HttpOnly, SameSite=Strict, Path=/, an expiry; only its SHA-256 stored;
               ended by sign-out, by expiry and by revoking the key
    forgery    a change made with the cookie needs this server's Origin *and* the CSRF
               token (each checked alone here); a real browser's cross-origin form post
               from another port of the same host (same site: the cookie goes along) is
               refused, and from another site the cookie does not even go
    CSP        the page's policy forbids inline script, and the browser enforces it
    headers    every answer: a CSP, no framing, same-origin resources, nosniff;
               exports and transcripts are attachments

A real `sbx serve`, httpx as a client and Debian's chromium where a browser's
behaviour is what is claimed.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import ThreadingHTTPServer

import pytest
from http_support import QuietHandler, serving
from playwright.sync_api import expect

import service_support
import web_support
from sbx.agent.core.hosting.store.db import Database
from sbx.agent.core.hosting.store.keys import revoke_key
from sbx.agent.core.hosting.store.models import WebSession
from sbx.agent.service.web.headers import PAGE_CSP
from sbx.agent.service.web.signin_sessions import COOKIE
from web_support import sign_in, watch

serve = service_support.serve
llm = service_support.llm
browser = web_support.browser


def _sqlite(tmp_path) -> str:
    return f"sqlite:///{tmp_path / 'data' / 'sbx.db'}"


def _signed_in(server, name: str):
    """(an httpx client holding a session cookie, the session's CSRF token, the raw cookie)."""
    key = server.key(name)
    client = server.client()
    answer = client.post("/web/session", json={"key": key}, headers={"Origin": server.url})
    assert answer.status_code == 200, answer.text
    raw = answer.headers["set-cookie"]
    _hold_cookie(client, raw.split(";")[0].split("=", 1)[1])
    return client, answer.json()["csrf_token"], raw


def _hold_cookie(client, token: str) -> None:
    """Keep the session cookie in `client` as a browser on loopback would.

    httpx sends a `Secure` cookie only over HTTPS; Chromium treats http://127.0.0.1 as
    secure (the browser tests check it), so the tests' client holds a plain copy.
    """
    client.cookies.clear()
    client.cookies.set(COOKIE, token)


@pytest.mark.docker
def test_the_session_cookie_is_httponly_strict_expiring_and_stored_only_as_a_hash(
    serve, tmp_path
):
    server = serve(_sqlite(tmp_path))
    client, csrf, raw = _signed_in(server, "ana")
    token = client.cookies[COOKIE]
    flags = [part.strip() for part in raw.split(";")]
    assert flags[0] == f"__Host-sbx_session={token}" and len(token) >= 43
    assert {"HttpOnly", "SameSite=Strict", "Path=/", "Secure"} <= set(flags)  # __Host- rules
    assert not any(flag.lower().startswith("domain") for flag in flags)
    assert any(flag.startswith("Max-Age=") and 0 < int(flag[8:]) <= 8 * 3600 for flag in flags)
    assert client.get("/v1/datasets").status_code == 200  # the cookie is a key for the API
    assert client.get("/web/session").json()["principal"] == "key:ana"

    db = Database.open(server.database)
    try:
        with db.read() as session:
            rows = session.query(WebSession).all()
        assert [row.token_hash for row in rows] == [hashlib.sha256(token.encode()).hexdigest()]
        for path in server.data_dir.glob("sbx.db*"):  # the database and its WAL
            assert token.encode() not in path.read_bytes()
        with db.write() as session:  # the session expires
            session.query(WebSession).update({WebSession.expires_at: time.time() - 1})
        assert client.get("/v1/datasets").status_code == 401
        assert client.get("/web/session").json() == {
            "signed_in": False, "principal": None, "csrf_token": None, "expires_at": None}

        client, csrf, _ = _signed_in(server, "bo")
        signed_out = client.delete("/web/session", headers={
            "Origin": server.url, "X-CSRF-Token": csrf})
        assert signed_out.status_code == 204
        assert "Max-Age=0" in signed_out.headers["set-cookie"]
        replay = server.client()
        replay.cookies.set(COOKIE, client.cookies.get(COOKIE) or token)
        assert replay.get("/v1/datasets").status_code == 401  # ended on the server too

        client, csrf, _ = _signed_in(server, "cy")
        revoke_key(db, "cy")
        assert client.get("/v1/datasets").status_code == 401
    finally:
        db.close()
    assert server.client().post("/web/session", json={"key": "sbx_nope"},
                                headers={"Origin": server.url}).status_code == 401


@pytest.mark.docker
def test_a_planted_session_is_refused_and_signing_in_rotates_the_session(serve, tmp_path):
    server = serve(_sqlite(tmp_path))
    attacker, _, raw = _signed_in(server, "mallory")
    planted = raw.split(";")[0].split("=", 1)[1]
    # A sibling origin can plant a cookie with Domain= but not a __Host- one: the plain
    # name a sibling could set authenticates nobody.
    victim = server.client()
    victim.cookies.set("sbx_session", planted)
    assert victim.get("/web/session").json()["signed_in"] is False
    assert victim.get("/v1/datasets").status_code == 401
    # A session carried into sign-in ends there; the browser gets a new token.
    _hold_cookie(victim, planted)
    assert victim.get("/web/session").json()["principal"] == "key:mallory"
    answer = victim.post("/web/session", json={"key": server.key("victor")},
                         headers={"Origin": server.url})
    assert answer.status_code == 200 and answer.json()["principal"] == "key:victor"
    fresh = answer.headers["set-cookie"].split(";")[0].split("=", 1)[1]
    assert fresh != planted
    _hold_cookie(victim, fresh)
    assert victim.get("/web/session").json()["principal"] == "key:victor"
    assert attacker.get("/v1/datasets").status_code == 401  # the planted session is gone


@pytest.mark.docker
def test_a_change_with_the_cookie_needs_this_servers_origin_and_the_csrf_token(serve, tmp_path):
    server = serve(_sqlite(tmp_path))
    client, csrf, _ = _signed_in(server, "ana")
    evil = "http://127.0.0.1:1"

    def create(**headers: str):
        return client.post("/v1/conversations", json={}, headers=headers)

    missing_origin = create(**{"X-CSRF-Token": csrf})
    assert missing_origin.status_code == 403, missing_origin.text
    assert missing_origin.json()["type"].endswith("/cross-origin-request")
    assert create(Origin=evil, **{"X-CSRF-Token": csrf}).status_code == 403  # token, wrong origin
    no_token = create(Origin=server.url)  # right origin, no token
    assert no_token.status_code == 403
    assert no_token.json()["type"].endswith("/csrf-token-invalid")
    assert create(Origin=server.url, **{"X-CSRF-Token": "0" * 64}).status_code == 403
    assert client.get("/v1/conversations").json()["items"] == []  # nothing was created
    assert create(Origin=server.url, **{"X-CSRF-Token": csrf}).status_code == 201
    assert client.delete("/web/session", headers={"Origin": server.url}).status_code == 403

    refused = server.client().post("/web/session", json={"key": server.key("bo")},
                                   headers={"Origin": evil})
    assert refused.status_code == 403  # another page cannot sign a visitor in
    assert "set-cookie" not in refused.headers
    bearer = server.client(server.key("cy"))  # a bearer key needs neither check
    assert bearer.post("/v1/conversations", json={}, headers={"Origin": evil}).status_code == 201


ATTACK = b"""<!doctype html><title>a page elsewhere</title>
<form method="post" action="%s"></form><script>document.forms[0].submit()</script>"""


@contextmanager
def attacker_page(target: str) -> Iterator[int]:
    """A page on another port of 127.0.0.1 that posts an empty form to `target` when opened."""

    class Handler(QuietHandler):
        def do_GET(self) -> None:
            self.send_body(200, ATTACK % target.encode(), "text/html")

    with serving(ThreadingHTTPServer(("127.0.0.1", 0), Handler)) as server:
        yield server.server_address[1]


@pytest.mark.docker
def test_a_forged_form_post_from_another_origin_is_refused_in_a_real_browser(
    serve, browser, tmp_path
):
    server = serve(_sqlite(tmp_path))
    page = browser.new_page()
    sign_in(page, server.url, server.key("ana"))
    cookie = next(c for c in browser.cookies() if c["name"] == COOKIE)
    assert cookie["httpOnly"] is True and cookie["sameSite"] == "Strict"
    assert cookie["secure"] is True  # kept over http://127.0.0.1: loopback counts as secure
    assert cookie["expires"] > time.time() + 3600
    assert page.evaluate("document.cookie") == ""  # scripts cannot read it

    target = server.url + "/v1/conversations"
    with attacker_page(target) as port:
        # Same site (127.0.0.1, another port): the browser sends the cookie; the server refuses.
        with page.expect_response(target) as same_site:
            page.goto(f"http://127.0.0.1:{port}/")
        assert same_site.value.status == 403
        assert same_site.value.request.header_value("cookie") is not None
        assert b"cross-origin-request" in same_site.value.body()
        # Another site (localhost): SameSite=Strict keeps the cookie home.
        with page.expect_response(target) as cross_site:
            page.goto(f"http://localhost:{port}/")
        assert cross_site.value.status == 401
        assert cross_site.value.request.header_value("cookie") is None

    client = server.client()
    client.cookies.set(COOKIE, cookie["value"])
    assert client.get("/v1/conversations").json()["items"] == []


@pytest.mark.docker
def test_the_page_has_a_strict_csp_the_browser_enforces_and_answers_are_not_framable(
    serve, browser, tmp_path
):
    server = serve(_sqlite(tmp_path))
    anonymous = server.client()
    for path in ("/", "/static/app.js", "/static/style.css"):
        answer = anonymous.get(path)
        assert answer.status_code == 200
        assert answer.headers["content-security-policy"] == PAGE_CSP
        assert answer.headers["x-frame-options"] == "DENY"
        assert answer.headers["x-content-type-options"] == "nosniff"
    assert "unsafe" not in PAGE_CSP and "frame-ancestors 'none'" in PAGE_CSP
    assert "script-src 'self'" in PAGE_CSP and "default-src 'self'" in PAGE_CSP
    api = anonymous.get("/v1/datasets")
    assert api.headers["content-security-policy"] == "default-src 'none'; frame-ancestors 'none'"
    assert api.headers["cross-origin-resource-policy"] == "same-origin"
    for path in ("/static/..%2Fpages.py", "/static/%2e%2e/pages.py", "/static/pages.py",
                 "/static/"):
        assert anonymous.get(path).status_code == 404, path

    page = browser.new_page()
    seen = watch(page)
    page.goto(server.url + "/")
    expect(page.get_by_label("API key")).to_be_visible()
    page.evaluate("""() => {
        const script = document.createElement('script');
        script.textContent = 'window.injected = true';
        document.body.append(script);
        const image = document.createElement('img');
        image.src = 'https://example.invalid/x.png';
        document.body.append(image);
    }""")
    assert page.evaluate("window.injected === undefined")
    assert any("Content Security Policy" in text for text in seen.console_errors), seen
    assert len(seen.console_errors) == 2, seen.console_errors  # the script and the image


@pytest.mark.docker
def test_exports_and_transcripts_are_attachments_and_other_principals_get_404(
    serve, llm, tmp_path
):
    from sbx.agent.testing.scripted_model import assistant, tool_call

    server = serve(_sqlite(tmp_path))
    client = server.client(server.key("ana"))
    conversation = client.post("/v1/conversations", json={}).json()["id"]
    base = f"/v1/conversations/{conversation}"
    assert client.get(f"{base}/export").status_code == 409  # nothing has ended yet
    llm.script([tool_call("execute_python", code="print(6 * 7)"), assistant("It is 42.")])
    run = client.post(f"{base}/questions", json={"question": "6 times 7?"}).json()["run_id"]
    assert service_support.stream(client, run)[-1]["data"]["status"] == "completed"
    for path, media in ((f"{base}/export?format=ipynb", "application/x-ipynb+json"),
                        (f"{base}/export?format=md", "text/markdown"),
                        (f"{base}/transcript", "application/x-ndjson")):
        answer = client.get(path)
        assert answer.status_code == 200, answer.text
        assert answer.headers["content-type"].startswith(media)
        assert answer.headers["content-disposition"].startswith(
            f'attachment; filename="{conversation}.')
        assert answer.headers["x-content-type-options"] == "nosniff"
    assert client.get(f"{base}/export?format=exe").status_code == 422
    other = server.client(server.key("bo"))
    assert other.get(f"{base}/export").status_code == 404
    assert other.get(f"{base}/transcript").status_code == 404
    usage = client.get("/v1/usage").json()
    assert usage["principal"] == "key:ana"
    assert usage["used"]["max_conversations"] == 1 and usage["used"]["runs_per_hour"] == 1
    assert other.get("/v1/usage").json()["used"]["runs_per_hour"] == 0
