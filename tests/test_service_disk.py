"""Disk a tenant fills: storage quota, run deletion, retention, uploads in flight, crash leftovers.

Every byte a key makes the server keep (datasets, run artifacts, stored run
events) counts against its `storage_bytes`; runs can be deleted (another
key's run is a 404); `[service] retention` expires old runs; the bytes of a
key's uploads in progress are bounded together, every multipart part has a
size limit, and a temporary upload a `kill -9` left is swept at start.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator

import httpx
import pytest

import service_support
from service_support import upload, wait_for

store = service_support.store
serve = service_support.serve
llm = service_support.llm
pg_cluster = service_support.pg_cluster

BOUNDARY = "sbxboundary42"
WRITE_100K = "open('/output/blob.bin', 'wb').write(b'x' * 100_000)"


def _multipart_head(name: str = "big.csv") -> bytes:
    return (f"--{BOUNDARY}\r\nContent-Disposition: form-data; name=\"file\"; "
            f"filename=\"{name}\"\r\nContent-Type: text/csv\r\n\r\n").encode()


def _held_upload(client: httpx.Client, first: bytes, gate: threading.Event,
                 answers: list[httpx.Response | BaseException]) -> threading.Thread:
    """An upload that sends `first`, then waits for `gate` before it ends (in a thread)."""

    def body() -> Iterator[bytes]:
        yield _multipart_head() + first
        gate.wait(120)
        yield f"\r\n--{BOUNDARY}--\r\n".encode()

    def send() -> None:
        try:
            answers.append(client.post(
                "/v1/datasets", content=body(),
                headers={"Content-Type": f"multipart/form-data; boundary={BOUNDARY}"}))
        except BaseException as exc:  # the server may be killed under it
            answers.append(exc)

    thread = threading.Thread(target=send, daemon=True)
    thread.start()
    return thread


def _partial_files(server: service_support.Server) -> list[int]:
    return [p.stat().st_size for p in (server.data_dir / "datasets").glob(".upload-*")]


@pytest.mark.docker
def test_artifacts_and_events_count_against_storage_and_deleting_a_run_frees_them(store, serve):
    server = serve(store)
    client = server.client(server.key("dora", storage_bytes=150 * 1024))
    other = server.client(server.key("eve"))
    assert client.get("/v1/usage").json()["used"]["storage_bytes"] == 0
    done = client.post("/v1/execute", json={"code": WRITE_100K})
    assert done.status_code == 200, done.text
    run = done.json()["run_id"]
    usage = client.get("/v1/usage").json()
    assert usage["quotas"]["storage_bytes"] == 150 * 1024
    assert usage["used"]["storage_bytes"] >= 100_000  # the artifact (and any stored events)
    assert client.post("/v1/execute", json={"code": WRITE_100K}).status_code == 200
    refused = client.post("/v1/execute", json={"code": "print(1)"})
    assert refused.status_code == 429, refused.text
    assert refused.json()["quota"] == "storage_bytes" and "retry-after" in refused.headers
    assert upload(client, "a.csv", b"a\n1\n").json()["quota"] == "storage_bytes"

    before = client.get("/v1/usage").json()["used"]["storage_bytes"]
    assert other.delete(f"/v1/runs/{run}").status_code == 404  # tenancy: not yours, not there
    assert client.get(f"/v1/runs/{run}").status_code == 200
    assert client.delete(f"/v1/runs/{run}").status_code == 204
    assert client.get(f"/v1/runs/{run}").status_code == 404
    assert client.get(f"/v1/runs/{run}/artifacts/blob.bin").status_code == 404
    assert not (server.data_dir / "executions" / run).exists()
    assert client.delete(f"/v1/runs/{run}").status_code == 404
    assert client.get("/v1/usage").json()["used"]["storage_bytes"] <= before - 100_000
    assert client.post("/v1/execute", json={"code": "print(1)"}).status_code == 200


@pytest.mark.docker
def test_retention_deletes_runs_with_their_events_and_artifacts(store, serve):
    server = serve(store, policy={"service": {"heartbeat": "0.2s", "retention": "1s"}})
    client = server.client(server.key("fred"))
    run = client.post("/v1/execute", json={"code": WRITE_100K}).json()["run_id"]
    assert (server.data_dir / "executions" / run / "blob.bin").exists()
    # The rows go in one transaction and the files after it commits, so a
    # reader can see the run gone a moment before its directory is.
    wait_for(lambda: client.get(f"/v1/runs/{run}").status_code == 404
             and not (server.data_dir / "executions" / run).exists(), timeout=60,
             what="the housekeeper to expire the run and remove its files")
    assert client.get("/v1/usage").json()["used"]["storage_bytes"] == 0


@pytest.mark.docker
def test_uploads_in_progress_are_bounded_per_key_and_every_part_has_a_limit(store, serve):
    server = serve(store)
    client = server.client(server.key("gail", dataset_bytes=1024**2))
    gate = threading.Event()
    answers: list[httpx.Response | BaseException] = []
    thread = _held_upload(client, b"a\n" + b"1\n" * 300_000, gate, answers)
    wait_for(lambda: sum(_partial_files(server)) >= 500_000, timeout=60,
             what="the first upload to be on disk")
    second = upload(client, "second.csv", b"a\n" + b"2\n" * 300_000)
    assert second.status_code == 429, second.text  # the two together pass the 1 MiB quota
    assert second.json()["quota"] == "dataset_bytes"
    gate.set()
    thread.join(120)
    assert isinstance(answers[0], httpx.Response) and answers[0].status_code == 201, answers

    junk = (f"--{BOUNDARY}\r\nContent-Disposition: form-data; name=\"note\"\r\n\r\n"
            ).encode() + b"j" * 200_000 + b"\r\n" + _multipart_head("small.csv") + (
            f"a\n1\n\r\n--{BOUNDARY}--\r\n").encode()
    field = client.post("/v1/datasets", content=junk,
                        headers={"Content-Type": f"multipart/form-data; boundary={BOUNDARY}"})
    assert field.status_code == 413, field.text
    assert field.json()["type"].endswith("/part-too-large")
    assert _partial_files(server) == []


@pytest.mark.docker
def test_a_partial_upload_left_by_kill_9_is_swept_at_start(serve, tmp_path):
    database = f"sqlite:///{tmp_path / 'data' / 'sbx.db'}"
    server = serve(database)
    client = server.client(server.key("hank"))
    gate = threading.Event()
    answers: list[httpx.Response | BaseException] = []
    thread = _held_upload(client, b"a\n" + b"1\n" * 100_000, gate, answers)
    wait_for(lambda: sum(_partial_files(server)) >= 100_000, timeout=60,
             what="the upload to be on disk")
    server.proc.send_signal(signal.SIGKILL)  # before any client closes its connection
    assert server.proc.wait(60) == -signal.SIGKILL
    gate.set()
    thread.join(60)
    assert _partial_files(server) != []  # the crash left it
    again = serve(database, data_dir=server.data_dir)
    assert _partial_files(again) == []
    assert again.client(server.key("ivy")).get("/v1/datasets").status_code == 200
