"""The model client verifies TLS against the CA bundle httpx would use, built once per process.

A real HTTPS endpoint on 127.0.0.1 with a certificate of its own (made with the
`openssl` command): trusted through `SSL_CERT_FILE` it answers, untrusted it is
refused, and clients share one TLS context per setting of that variable.
"""

from __future__ import annotations

import http.server
import json
import ssl
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from http_support import QuietHandler, serving

from sbx.agent.core.settings import AgentSettings, Endpoint
from sbx.agent.model.boundary import RequestGuard
from sbx.agent.model.client import ModelClient, ModelError
from sbx.agent.model.http import GuardedTransport, _ssl_context, shared_ssl_context
from sbx.tools.guard import DataGuard
from sbx.tools.guard_policy import GuardRules

REPLY = {"id": "c1", "object": "chat.completion", "created": 0, "model": "m",
         "choices": [{"index": 0, "finish_reason": "stop",
                      "message": {"role": "assistant", "content": "over TLS"}}],
         "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}}


class _Completions(QuietHandler):
    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("content-length", "0")))
        self.send_body(200, json.dumps(REPLY).encode(), "application/json")


@pytest.fixture
def https_endpoint(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """(base URL, the certificate to trust) of an HTTPS server on 127.0.0.1."""
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                    "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
                    "-keyout", str(key), "-out", str(cert)], check=True, capture_output=True)
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Completions)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    with serving(server):
        yield f"https://127.0.0.1:{server.server_address[1]}/v1", cert


def _ask(base_url: str) -> str:
    settings = AgentSettings(max_retries=0)
    with ModelClient.connect(Endpoint(base_url=base_url, api_key="sk-test", model="m"),
                             settings) as client:
        reply = client.complete([{"role": "user", "content": "hi"}], [], timeout=30,
                                guard=RequestGuard(DataGuard(GuardRules())))
    return str(reply.content)


def test_a_trusted_certificate_answers_and_an_untrusted_one_is_refused(
    https_endpoint, monkeypatch
) -> None:
    base_url, cert = https_endpoint
    monkeypatch.delenv("SSL_CERT_DIR", raising=False)
    monkeypatch.delenv("SSL_CERT_FILE", raising=False)
    with pytest.raises(ModelError):
        _ask(base_url)  # the default bundle does not know this certificate
    default = shared_ssl_context()
    monkeypatch.setenv("SSL_CERT_FILE", str(cert))
    assert _ask(base_url) == "over TLS"
    trusting = shared_ssl_context()
    assert trusting is not default and trusting is shared_ssl_context()
    assert GuardedTransport(max_bytes=1 << 20)._pool._ssl_context is trusting


def test_a_burst_of_first_conversations_builds_the_tls_context_once(
    monkeypatch, tmp_path
) -> None:
    monkeypatch.delenv("SSL_CERT_FILE", raising=False)
    monkeypatch.setenv("SSL_CERT_DIR", str(tmp_path))  # a cache key no other test used
    _ssl_context.cache_clear()
    start, got = threading.Barrier(8), []

    def first_call() -> None:
        start.wait()
        got.append(shared_ssl_context())

    threads = [threading.Thread(target=first_call) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(got) == 8 and all(context is got[0] for context in got)
    assert _ssl_context.cache_info().misses == 1  # built once, not once per waiting caller
