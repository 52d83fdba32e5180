"""http_get against a real HTTP server on loopback: allowlist, redirects, DNS, size and time.

Loopback is refused by the address policy, so every successful fetch here goes
through the test-only hooks of `make_http_get`: a resolver that maps made-up
names to 127.0.0.1, and `exempt` naming exactly that address. The names do not
exist in any DNS, so a success also proves the fetch connected to the address it
checked rather than resolving again.
"""

from __future__ import annotations

import ipaddress
import json
import time
from collections.abc import Iterator
from http.server import ThreadingHTTPServer
from typing import cast

import pytest
from http_support import QuietHandler, serving

from sbx.tools.builtin.http_get import make_http_get
from sbx.tools.policy import HttpGetRule
from sbx.tools.registry import ToolFailure
from tools_support import events, make_gate, policy_from

LOOPBACK = ipaddress.ip_address("127.0.0.1")


class Handler(QuietHandler):
    def do_GET(self) -> None:
        port = cast(ThreadingHTTPServer, self.server).server_port
        routes = {
            "/hello": lambda: self.send_body(200, b"hello from loopback",
                                             "text/plain; charset=utf-8"),
            "/same": lambda: self._redirect(f"http://data.test:{port}/hello"),
            "/relative": lambda: self._redirect("/hello"),
            "/evil": lambda: self._redirect(f"http://evil.test:{port}/hello"),
            "/private": lambda: self._redirect(f"http://internal.test:{port}/hello"),
            "/rebind": lambda: self._redirect(f"http://rebind.test:{port}/hello"),
            "/loop": lambda: self._redirect("/loop"),
            "/big": lambda: self.send_body(200, b"x" * 3_000_000, "text/plain"),
            "/png": lambda: self.send_body(200, b"\x89PNG\r\n\x1a\n\0\0", "image/png"),
            "/slow": self._slow,
        }
        try:
            routes[self.path]()
        except (BrokenPipeError, ConnectionResetError):
            pass

    def _redirect(self, location: str) -> None:
        self.send_response(302)
        self.send_header("Location", location)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def _slow(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.end_headers()
        for _ in range(50):
            self.wfile.write(b".")
            self.wfile.flush()
            time.sleep(0.1)


@pytest.fixture(scope="module")
def port() -> Iterator[int]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    with serving(server):
        yield server.server_address[1]


class FakeDNS:
    """Answers for made-up names; `rebind.test` answers differently the second time."""

    def __init__(self) -> None:
        self.asked: list[str] = []

    def __call__(self, host: str, port: int) -> list[str]:
        self.asked.append(host)
        if host == "rebind.test":
            return ["127.0.0.1"] if self.asked.count(host) == 1 else ["127.0.0.2"]
        return {
            "data.test": ["127.0.0.1"],
            "internal.test": ["10.0.0.7"],
            "mixed.test": ["127.0.0.1", "10.1.2.3"],
            "metadata.test": ["169.254.169.254"],
        }[host]


def rule(port: int, **overrides) -> HttpGetRule:
    domains = [
        "data.test",
        "internal.test",
        "rebind.test",
        "mixed.test",
        "metadata.test",
        "localhost",
        "127.0.0.1",
    ]
    return HttpGetRule(enabled=True, allowed_domains=domains, allowed_ports=[port], **overrides)


def fetch(
    port: int,
    path: str,
    *,
    host: str = "data.test",
    dns: FakeDNS | None = None,
    exempt=frozenset({LOOPBACK}),
    **overrides,
) -> str:
    tool = make_http_get(rule(port, **overrides), resolver=dns or FakeDNS(), exempt=exempt)
    return str(tool.fn(url=f"http://{host}:{port}{path}").text)


def refused(port: int, path: str, **kwargs) -> str:
    with pytest.raises(ToolFailure) as info:
        fetch(port, path, **kwargs)
    return str(info.value)


def test_loopback_is_refused_without_the_test_hook(port) -> None:
    tool = make_http_get(rule(port))  # the system resolver, nothing exempt
    for host in ("localhost", "127.0.0.1"):
        with pytest.raises(
            ToolFailure, match=r"resolves to 127\.0\.0\.1, a loopback address; refused"
        ):
            tool.fn(url=f"http://{host}:{port}/hello")


def test_fetch_through_the_test_hook(port) -> None:
    text = fetch(port, "/hello")
    assert text.startswith("HTTP 200 OK\n")
    assert f"URL: http://data.test:{port}/hello" in text
    assert text.endswith("\nhello from loopback")


def test_redirects_are_followed_and_rechecked(port) -> None:
    dns = FakeDNS()
    text = fetch(port, "/same", dns=dns)
    assert (
        "hello from loopback" in text and f"Redirected via: http://data.test:{port}/hello" in text
    )
    assert dns.asked == ["data.test", "data.test"]  # resolved again for the new hop
    assert "hello from loopback" in fetch(port, "/relative")
    assert refused(port, "/evil") == "host 'evil.test' is not in tools.http_get.allowed_domains"
    assert (
        refused(port, "/private")
        == "'internal.test' resolves to 10.0.0.7, a private address; refused"
    )
    assert refused(port, "/loop", max_redirects=2).startswith("more than 2 redirects")


def test_dns_answers_are_checked_on_every_hop(port) -> None:
    dns = FakeDNS()
    message = refused(port, "/rebind", host="rebind.test", dns=dns)
    assert message == "'rebind.test' resolves to 127.0.0.2, a loopback address; refused"
    assert dns.asked == ["rebind.test", "rebind.test"]
    assert "10.1.2.3, a private address" in refused(port, "/hello", host="mixed.test")
    assert "169.254.169.254, a link-local address" in refused(port, "/hello", host="metadata.test")


def test_literal_addresses_and_bad_urls(port) -> None:
    tool = make_http_get(
        HttpGetRule(enabled=True, allowed_domains=["169.254.169.254", "data.test"])
    )
    with pytest.raises(ToolFailure, match="link-local"):
        tool.fn(url="http://169.254.169.254/latest/meta-data/")
    for url, message in [
        ("ftp://data.test/x", "only http and https"),
        ("http://user:pw@data.test/", "credentials in URLs"),
        ("http://data.test/a b", "whitespace or control"),
        ("http://data.test:8443/", "port 8443 is not in tools.http_get.allowed_ports"),
    ]:
        with pytest.raises(ToolFailure, match=message):
            tool.fn(url=url)


def test_size_and_time_bounds(port) -> None:
    text = fetch(port, "/big", max_bytes=1000)
    assert text.split("\n\n")[1] == "x" * 1000
    assert text.endswith("[body cut at 1000 bytes: tools.http_get.max_bytes]")
    # /slow sends a byte every 0.1 s for 5 s: only a limit on the whole fetch (not one per
    # read) ends it, and the message says which limit did
    message = refused(port, "/slow", timeout=0.5)
    assert message == "fetching data.test timed out (limit: tools.http_get.timeout)"
    assert "[binary content, 10 bytes, not shown]" in fetch(port, "/png")


def test_http_get_through_the_gate(tmp_path, port) -> None:
    data = {
        "tools": {
            "http_get": {"enabled": True, "allowed_domains": ["data.test"], "allowed_ports": [port]}
        }
    }
    policy = policy_from(data)
    hooked = make_http_get(policy.tools.http_get, resolver=FakeDNS(), exempt=frozenset({LOOPBACK}))
    gate, log = make_gate(tmp_path, policy, extra_tools=[hooked], replace=True)
    ok = gate.call(
        name="http_get",
        arguments=json.dumps({"url": f"http://data.test:{port}/hello"}),
        call_id="1",
    )
    assert ok.status == "ok" and "hello from loopback" in ok.text
    redirected = gate.call(
        name="http_get", arguments=json.dumps({"url": f"http://data.test:{port}/evil"}), call_id="2"
    )
    assert redirected.status == "error"
    assert (
        redirected.text
        == "Error from http_get: host 'evil.test' is not in tools.http_get.allowed_domains"
    )
    outcomes = events(log, "outcome")
    assert outcomes[0]["status_code"] == 200 and outcomes[0]["body_bytes"] == 19
    assert outcomes[1]["status"] == "error"
