"""Hostile names and ids: a bad event id is a 4xx after the ownership check; any artifact name
downloads."""

from __future__ import annotations

from urllib.parse import quote

import pytest

import service_support

store = service_support.store
serve = service_support.serve
llm = service_support.llm
pg_cluster = service_support.pg_cluster

UNICODE_ARTIFACTS = (
    "open('/output/图表.png', 'wb').write(b'\\x89PNG\\r\\n\\x1a\\n' + b'0' * 64)\n"
    "open('/output/📊.csv', 'w').write('a,b\\n1,2\\n')\n"
)


@pytest.mark.docker
def test_a_bad_event_id_is_a_4xx_problem_after_the_ownership_check(store, serve):
    server = serve(store)
    client = server.client(server.key("jack"))
    stranger = server.client(server.key("kate"))
    run = client.post("/v1/execute", json={"code": "print(1)"}).json()["run_id"]
    for headers, query in (({"Last-Event-ID": "²".encode("latin-1")}, ""), ({}, "?after=%C2%B2"),
                           ({"Last-Event-ID": "١٢".encode()}, ""), ({}, "?after=-1"),
                           ({"Last-Event-ID": "9" * 13}, "")):
        answer = client.get(f"/v1/runs/{run}/events{query}", headers=headers)
        assert answer.status_code == 400, (headers, query, answer.text)
        assert answer.headers["content-type"] == "application/problem+json"
        assert answer.json()["type"].endswith("/bad-last-event-id")
        hidden = stranger.get(f"/v1/runs/{run}/events{query}", headers=headers)
        assert hidden.status_code == 404, (headers, query, hidden.text)  # ownership first
    resumed = client.get(f"/v1/runs/{run}/events", headers={"Last-Event-ID": "1"})
    assert resumed.status_code == 200 and "id: 1\n" not in resumed.text


@pytest.mark.docker
def test_artifacts_with_unicode_names_download_with_an_rfc_6266_header(store, serve):
    server = serve(store)
    client = server.client(server.key("liam"))
    done = client.post("/v1/execute", json={"code": UNICODE_ARTIFACTS})
    assert done.status_code == 200, done.text
    urls = {a["name"]: a["url"] for a in done.json()["artifacts"]}
    assert set(urls) == {"图表.png", "📊.csv"}
    run = done.json()["run_id"]
    assert urls["图表.png"] == f"/v1/runs/{run}/artifacts/{quote('图表.png')}"  # ASCII URLs
    chart = client.get(urls["图表.png"])
    assert chart.status_code == 200 and chart.content.startswith(b"\x89PNG")
    assert chart.headers["content-disposition"] == (
        "inline; filename=\"_.png\"; filename*=UTF-8''%E5%9B%BE%E8%A1%A8.png")
    table = client.get(urls["📊.csv"])
    assert table.status_code == 200 and table.content == b"a,b\n1,2\n"
    assert table.headers["content-disposition"].endswith("filename*=UTF-8''%F0%9F%93%8A.csv")
    assert table.headers["content-disposition"].startswith('attachment; filename="')
