"""Bad input gets a 4xx problem body, never a traceback, and a slow client cannot hold on.

Raw sockets where httpx would tidy the request (dot segments, stalled bodies).
"""

from __future__ import annotations

import json
import socket
import stat
from urllib.parse import urlsplit

import pytest

import service_support
from service_support import upload

store = service_support.store
serve = service_support.serve
llm = service_support.llm
pg_cluster = service_support.pg_cluster


def _problem(response, status: int) -> dict:
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/problem+json"
    assert "Traceback" not in response.text
    body = response.json()
    assert {"type", "title", "status", "detail"} <= set(body) and body["status"] == status
    return body


def _raw(url: str, request: bytes, *, timeout: float = 60.0) -> bytes:
    """Send raw bytes, read until the server closes or the headers and body arrive."""
    parts = urlsplit(url)
    with socket.create_connection((parts.hostname, parts.port), timeout=timeout) as sock:
        sock.sendall(request)
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
            head, _, body = data.partition(b"\r\n\r\n")
            if _ and b"content-length:" in head.lower():
                length = int(head.lower().split(b"content-length:")[1].split(b"\r\n")[0])
                if len(body) >= length:
                    break
        return data


@pytest.mark.docker
def test_malformed_unknown_oversize_and_mistyped_bodies_are_problems(store, serve):
    server = serve(store, policy={"service": {"max_body": "2k"}})
    client = server.client(server.key("mallory"))
    body = _problem(client.post("/v1/conversations", content=b"{not json",
                                headers={"content-type": "application/json"}), 400)
    assert body["type"].endswith("/malformed-json")
    _problem(client.post("/v1/conversations", content=b'{"model": "a", "model": "b"}',
                         headers={"content-type": "application/json"}), 400)
    _problem(client.post("/v1/conversations", content=b"[1, 2]",
                         headers={"content-type": "application/json"}), 400)
    unknown = _problem(client.post("/v1/conversations", json={"datasets": [], "sudo": True}),
                       422)
    assert unknown["detail"] == "sudo: unknown field"
    assert unknown["errors"][0]["loc"] == ["sudo"]
    _problem(client.post("/v1/conversations", json={"limits": {"memory": "64g"}}), 422)
    _problem(client.post("/v1/conversations", json={"model": "gpt-9"}), 422)
    _problem(client.post("/v1/conversations", content=b"datasets=x",
                         headers={"content-type": "application/x-www-form-urlencoded"}), 415)
    _problem(client.post("/v1/execute", json={"code": "x" * 5000}), 413)  # declared length

    def chunks():
        for _ in range(10):
            yield b" " * 1024

    _problem(client.post("/v1/execute", content=chunks(),  # chunked: counted as it comes
                         headers={"content-type": "application/json"}), 413)
    deep = b"[" * 1000 + b"]" * 1000  # under the size limit, over the parser's depth
    _problem(client.post("/v1/execute", content=deep,
                         headers={"content-type": "application/json"}), 400)
    _problem(client.get("/v1/no-such-thing"), 404)
    _problem(client.put("/v1/datasets"), 405)


@pytest.mark.docker
def test_names_and_ids_from_the_client_never_become_paths(store, serve):
    server = serve(store)
    key = server.key("trudy")
    client = server.client(key)
    stored = upload(client, "../../etc/cron.d/evil name;rm -rf.csv", b"a,b\n1,2\n")
    assert stored.status_code == 201, stored.text
    assert stored.json()["name"] == "evil_name_rm_-rf.csv"
    dataset = stored.json()["id"]
    assert (server.data_dir / "datasets" / dataset / "evil_name_rm_-rf.csv").is_file()
    assert stat.S_IMODE(server.data_dir.stat().st_mode) == 0o700  # private to the server
    assert stat.S_IMODE((server.data_dir / "datasets" / dataset).stat().st_mode) == 0o700
    assert _problem(upload(client, "..", b"a\n1\n"), 415)["type"].endswith("unsupported-format")
    _problem(upload(client, "tool.exe", b"MZ"), 415)
    _problem(upload(client, "fake.parquet", b"a,b\n1,2\n"), 422)  # not what its name says
    _problem(upload(client, "bin.csv", b"a,b\x00\n"), 422)
    _problem(client.post("/v1/datasets", content=b"a,b\n", headers={
        "content-type": "text/csv"}), 415)
    for path in ("/v1/datasets/ds-..%2F..%2Fetc", "/v1/datasets/..", "/v1/runs/run-x/artifacts/"
                 "..%2F..%2Fsbx.db", f"/v1/datasets/{dataset}%00"):
        _problem(client.get(path), 404)
    raw = _raw(server.url, f"GET /v1/runs/run-000000000000/artifacts/../../../../etc/passwd "
               f"HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {key}\r\n"
               "Connection: close\r\n\r\n".encode())
    assert raw.startswith(b"HTTP/1.1 404"), raw[:200]
    assert b"root:" not in raw


@pytest.mark.docker
def test_a_client_that_stalls_gets_408_mid_body_and_is_disconnected_mid_headers(store, serve):
    server = serve(store, policy={"service": {"client_timeout": "1s"}})
    trickle = _raw(server.url, b"GET /healthz HTTP/1.1\r\nHost: x\r\n")  # and no blank line
    assert trickle == b""  # the server closed the connection: no answer, no held slot

    key = server.key("slow")
    head = (f"POST /v1/conversations HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {key}\r\n"
            "Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"datasets\"")
    answer = _raw(server.url, head.encode())  # then silence: the server must answer and close
    status, _, rest = answer.partition(b"\r\n")
    assert status == b"HTTP/1.1 408 Request Timeout", answer[:300]
    assert json.loads(rest.partition(b"\r\n\r\n")[2])["type"].endswith("/body-timeout")
