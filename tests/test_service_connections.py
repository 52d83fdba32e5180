"""Connections: a request's head and body have a total deadline (a regular trickle is cut too), and
one client address cannot hold more than `client_connections` of the server's connections."""

from __future__ import annotations

import json
import select
import socket
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest

import service_support
from sbx.agent.core.config import load_config
from sbx.agent.service.edge import MAX_ANONYMOUS, MAX_CONNECTIONS, TrustedProxies
from sbx.tools.policy import PolicyError

serve = service_support.serve
llm = service_support.llm

HOSTILE = "127.0.0.2"  # another loopback address: the tests' own requests come from 127.0.0.1


def sqlite(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'data' / 'sbx.db'}"


def connect(url: str, source: str = HOSTILE) -> socket.socket:
    parts = urlsplit(url)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind((source, 0))
    sock.settimeout(60)
    sock.connect((parts.hostname, parts.port))
    return sock


def read_to_end(sock: socket.socket) -> bytes:
    """Everything the server sends until it closes (a reset counts as the end)."""
    data = b""
    try:
        while chunk := sock.recv(65536):
            data += chunk
    except ConnectionResetError:
        pass
    finally:
        sock.close()
    return data


def ended(sock: socket.socket) -> bool:
    """Whether the server closed the connection (an answer may come first)."""
    try:
        return sock.recv(65536) == b""
    except ConnectionResetError:
        return True


@pytest.mark.docker
def test_a_body_trickled_a_byte_at_a_time_is_cut_at_its_deadline(serve, tmp_path):
    server = serve(sqlite(tmp_path), policy={"service": {"client_timeout": "2s"}})
    sock = connect(server.url)
    sock.sendall(b"POST /web/session HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                 b"Content-Length: 1000000\r\n\r\n{")
    cut = False
    for _ in range(60):  # a byte a second: never the 2 s pause the gateway answers with 408
        try:
            sock.sendall(b" ")
        except OSError:
            cut = True
            break
        readable, _, _ = select.select([sock], [], [], 1.0)
        if readable and ended(sock):
            cut = True
            break
    sock.close()
    assert cut, "a body trickled for 60 s was still being read"
    assert httpx.get(server.url + "/healthz").status_code == 200


@pytest.mark.docker
def test_one_address_holding_many_slow_connections_leaves_others_served(serve, tmp_path):
    server = serve(sqlite(tmp_path),
                   policy={"service": {"client_timeout": "5s", "client_connections": 8}})
    hostile = []
    for _ in range(40):
        sock = connect(server.url)
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")  # a head that never ends
        hostile.append(sock)
    started = time.monotonic()
    for _ in range(10):  # from 127.0.0.1, each on a new connection, while those are held
        assert httpx.get(server.url + "/healthz", timeout=60).status_code == 200
    legit_s = time.monotonic() - started
    outcomes = [read_to_end(sock) for sock in hostile]
    refused = [o for o in outcomes if o.startswith(b"HTTP/1.1 503")]
    held = [o for o in outcomes if o == b""]  # closed at the head's deadline, no answer
    assert len(refused) == 32 and len(held) == 8, (outcomes, legit_s)
    assert b"Retry-After: 5" in refused[0]


@pytest.mark.docker
def test_a_refused_connection_reads_its_503(serve, tmp_path):
    server = serve(sqlite(tmp_path),
                   policy={"service": {"client_timeout": "5s", "client_connections": 2}})
    held = [connect(server.url) for _ in range(2)]
    for sock in held:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")  # a head that never ends
    transport = httpx.HTTPTransport(local_address=HOSTILE, retries=0)
    with httpx.Client(transport=transport, timeout=30) as client:
        for _ in range(5):  # the client sends its whole body before it reads the answer
            answer = client.post(server.url + "/web/session", content=b" " * (512 * 1024),
                                 headers={"Content-Type": "application/json"})
            assert answer.status_code == 503, answer.text
            assert answer.headers["Retry-After"] == "5"
            assert answer.text == "too many connections from this address; retry\r\n"
    for sock in held:
        sock.close()


def test_an_answer_before_the_body_ends_is_followed_by_a_fin_not_a_reset(serve, tmp_path):
    server = serve(sqlite(tmp_path), policy={"service": {"max_body": "2k"}})
    sock = connect(server.url, source="127.0.0.1")

    def chunk(size: int) -> bytes:
        return f"{size:x}\r\n".encode() + b" " * size + b"\r\n"

    sock.sendall(b"POST /v1/execute HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " +
                 server.key("mallory").encode() + b"\r\nContent-Type: application/json\r\n"
                 b"Transfer-Encoding: chunked\r\n\r\n" + chunk(4096))
    head = b""
    while b"\r\n\r\n" not in head:
        head += sock.recv(65536)
    assert head.startswith(b"HTTP/1.1 413 "), head[:200]
    assert b"connection: close" in head.lower()
    # A client that writes its whole body before it reads goes on sending: the server
    # still reads and drops it (a closed socket would answer it with a reset, and the
    # client's next write would fail with a broken pipe or a reset).
    for _ in range(64):
        sock.sendall(chunk(8192))
    sock.shutdown(socket.SHUT_WR)
    try:
        while sock.recv(65536):
            pass
    finally:
        sock.close()


def test_an_answer_before_the_body_arrived_says_the_connection_closes(serve, tmp_path):
    server = serve(sqlite(tmp_path), policy={"service": {"max_body": "2k"}})
    key = server.key("mallory").encode()
    heads = {  # each answered before a byte of its body is sent
        "declared over max_body": b"POST /v1/execute HTTP/1.1\r\nHost: x\r\nAuthorization: "
                                  b"Bearer " + key + b"\r\nContent-Length: 5000\r\n\r\n",
        "no such route": b"POST /v1/nothing HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " +
                         key + b"\r\nContent-Length: 100\r\n\r\n",
    }
    for what, head in heads.items():
        with connect(server.url, source="127.0.0.1") as sock:
            sock.sendall(head)
            answer = b""
            while b"\r\n\r\n" not in answer:
                answer += sock.recv(65536)
            # Told keep-alive, a client would pool the connection and could send its next
            # request on it before the server's FIN arrived, to have it dropped unanswered.
            assert b"\r\nconnection: close\r\n" in answer.lower(), (what, answer[:300])


def read_answer(sock: socket.socket) -> tuple[bytes, bytes]:
    """One answer's head and body (by its Content-Length); an empty head if the server closed."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            return b"", data
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = next(int(line.split(b":", 1)[1]) for line in head.lower().split(b"\r\n")
                  if line.startswith(b"content-length:"))
    while len(body) < length:
        chunk = sock.recv(65536)
        assert chunk, f"closed mid-answer: {head!r}"
        body += chunk
    return head, body


def test_a_request_sent_before_the_last_answer_was_ended_is_answered(serve, tmp_path):
    """A client that has read an answer's last byte sends its next request at once, while the
    server may still be ending that answer (a streamed one, such as an artifact's): the next
    request's body, still on its way then, is read, not taken for one answered early."""
    server = serve(sqlite(tmp_path))
    key = server.key("nina").encode()
    with connect(server.url, source="127.0.0.1") as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"
                     b"POST /v1/conversations HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " +
                     key + b"\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n")
        head, _ = read_answer(sock)
        assert head.startswith(b"HTTP/1.1 200 "), head
        sock.sendall(b"{}")
        head, body = read_answer(sock)
        assert head.startswith(b"HTTP/1.1 201 "), (head, body)
        assert b"connection: close" not in head.lower()


@pytest.mark.docker
def test_a_request_received_before_the_last_answer_ended_is_not_cut_at_its_head_deadline(
        serve, tmp_path):
    """The head deadline is for a request not yet in: one that arrived whole while the answer
    before it was being sent is the application's, however long it runs."""
    server = serve(sqlite(tmp_path), policy={"service": {"client_timeout": "1s"}})
    key = server.key("nina").encode()
    body = b'{"code": "import time\\ntime.sleep(2.5)\\nprint(\'slept\')"}'
    with connect(server.url, source="127.0.0.1") as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"
                     b"POST /v1/execute HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + key +
                     b"\r\nContent-Type: application/json\r\nContent-Length: " +
                     str(len(body)).encode() + b"\r\n\r\n" + body)
        head, _ = read_answer(sock)
        assert head.startswith(b"HTTP/1.1 200 "), head
        head, answer = read_answer(sock)
        assert head.startswith(b"HTTP/1.1 200 "), (head, answer)
        assert json.loads(answer)["execution"]["stdout"] == "slept\n"


def answered(socks: list[socket.socket], count: int, within_s: float) -> list[socket.socket]:
    """The sockets with something to read, once `count` of them have (or `within_s` passed)."""
    deadline = time.monotonic() + within_s
    readable: list[socket.socket] = []
    while len(readable) < count and time.monotonic() < deadline:
        readable, _, _ = select.select(socks, [], [], 0.5)
    return readable


SLOW_BODY = (b"POST /web/session HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
             b"Content-Length: 100000\r\n\r\n{")
"""A request without credentials whose body never comes."""


def behind_proxy(serve, tmp_path, per_client: int) -> tuple[Any, bytes]:
    """A server trusting 127.0.0.1 as its proxy, and a keyed request's head (a listing)."""
    server = serve(sqlite(tmp_path), policy={"service": {
        "client_timeout": "5s", "client_connections": per_client,
        "trusted_proxies": ["127.0.0.1"]}})
    listing = (b"GET /v1/conversations HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
               b"Authorization: Bearer " + server.key("tess").encode() + b"\r\n\r\n")
    return server, listing


def forwarded(url: str, client: str, head: bytes) -> socket.socket:
    """A connection from the proxy (127.0.0.1) carrying a request of `client`."""
    sock = connect(url, source="127.0.0.1")
    sock.sendall(head.replace(b"\r\n\r\n", f"\r\nX-Forwarded-For: {client}\r\n\r\n".encode(), 1))
    return sock


@pytest.mark.docker
def test_behind_a_trusted_proxy_one_clients_slow_bodies_leave_the_others_served(serve, tmp_path):
    server, listing = behind_proxy(serve, tmp_path, per_client=8)
    flood = [forwarded(server.url, "203.0.113.7", SLOW_BODY) for _ in range(40)]
    started = time.monotonic()
    for n in range(10):  # other clients of the same proxy, each request on a new connection
        sock = forwarded(server.url, f"spoofed, 198.51.100.{n % 2}", listing)
        answer = read_to_end(sock)
        assert answer.startswith(b"HTTP/1.1 200"), answer[:200]
    served_s = time.monotonic() - started
    outcomes = [read_to_end(sock) for sock in flood]
    refused = [o for o in outcomes if o.startswith(b"HTTP/1.1 503")]
    assert len(refused) == 32, (outcomes, served_s)  # the flooding client's own 8 held theirs
    assert b"too many connections from this address" in refused[0]


@pytest.mark.docker
def test_requests_without_credentials_cannot_take_the_places_kept_for_keys(serve, tmp_path):
    server, listing = behind_proxy(serve, tmp_path, per_client=1000)
    flood = [forwarded(server.url, f"10.1.{n // 250}.{n % 250 + 1}", SLOW_BODY)
             for n in range(MAX_ANONYMOUS + 8)]  # each its own client, none with a key
    over = 8
    assert len(answered(flood, over, within_s=30)) >= over  # the refusals are out
    for _ in range(5):
        answer = read_to_end(forwarded(server.url, "198.51.100.9", listing))
        assert answer.startswith(b"HTTP/1.1 200"), answer[:200]
    outcomes = [read_to_end(sock) for sock in flood]
    refused = [o for o in outcomes if o.startswith(b"HTTP/1.1 503")]
    assert len(refused) == over, refused[:1]
    assert all(b"too many requests without credentials" in o for o in refused)
    assert MAX_CONNECTIONS - MAX_ANONYMOUS >= 128


@pytest.mark.parametrize(("peer", "forwarded", "client"), [
    ("10.0.0.5", [b"198.51.100.2"], "198.51.100.2"),  # the proxy's own entry
    ("10.0.0.5", [b"1.2.3.4, 198.51.100.2"], "198.51.100.2"),  # the client's own is never read
    ("10.0.0.5", [b"1.2.3.4", b"198.51.100.2, 10.0.0.9"], "198.51.100.2"),  # two proxies deep
    ("10.0.0.5", [b"[2001:db8::1]:443"], "2001:db8::1"),
    ("10.0.0.5", [b"198.51.100.2:5000"], "198.51.100.2"),
    ("10.0.0.5", [b"unknown"], "10.0.0.5"),  # not an address: the proxy itself
    ("10.0.0.5", [], "10.0.0.5"),
    ("192.0.2.7", [b"198.51.100.2"], "192.0.2.7"),  # not a trusted proxy: its header is ignored
])
def test_the_client_behind_trusted_proxies_is_the_one_the_nearest_proxy_saw(peer, forwarded,
                                                                              client):
    assert TrustedProxies(["10.0.0.0/16"]).client(peer, forwarded) == client


@pytest.mark.parametrize(("peer", "forwarded", "scheme"), [
    ("10.0.0.5", [b"https"], "https"),
    ("10.0.0.5", [b"http, HTTPS"], "https"),  # the nearest proxy's, the right-most
    ("10.0.0.5", [b"https", b"http"], "http"),
    ("10.0.0.5", [b"gopher"], None),  # not a scheme of this server: the connection's stands
    ("10.0.0.5", [], None),
    ("127.0.0.1", [b"https"], None),  # loopback is no proxy unless named
])
def test_the_scheme_is_read_from_a_trusted_proxy_only(peer, forwarded, scheme):
    assert TrustedProxies(["10.0.0.0/16"]).scheme(peer, forwarded) == scheme


def test_trusted_proxies_must_be_addresses_or_networks(tmp_path):
    path = tmp_path / "sbx.toml"
    path.write_text('[service]\ntrusted_proxies = ["10.0.0.0/8", "proxy.internal"]\n')
    with pytest.raises(PolicyError, match="'proxy.internal' is not an IP address or network"):
        load_config(path)
