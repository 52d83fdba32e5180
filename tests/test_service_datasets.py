"""Datasets: each format taken and previewed at upload, listed, shown, deleted; in use is kept."""

from __future__ import annotations

import pytest

import service_support
from service_support import upload

store = service_support.store
serve = service_support.serve
llm = service_support.llm
pg_cluster = service_support.pg_cluster


@pytest.mark.docker
def test_each_format_is_taken_with_a_preview_and_listed_newest_first(store, serve):
    server = serve(store)
    client = server.client(server.key("nina"))
    files = {
        "sales.csv": (b"region,revenue\nNorth,10.5\nSouth,12\n", "columns: region (text), "
                      "revenue (float)"),
        "sales.tsv": (b"region\trevenue\nNorth\t10\n", "columns: region (text), revenue (int)"),
        "data.json": (b'[{"a": 1}]', "pd.read_json"),
        "rows.jsonl": (b'{"a": 1}\n{"a": 2}\n', "pd.read_json(lines=True)"),
        "t.parquet": (b"PAR1" + b"\x00" * 16 + b"PAR1", "pd.read_parquet"),
        "book.xlsx": (b"PK\x03\x04" + b"\x00" * 16, "pd.read_excel"),
    }
    ids = {}
    for name, (content, expected) in files.items():
        answer = upload(client, name, content)
        assert answer.status_code == 201, (name, answer.text)
        body = answer.json()
        assert body["name"] == name and body["size"] == len(content)
        assert body["preview"].startswith(f"- /data/{name}") and expected in body["preview"]
        ids[name] = body["id"]
    listed = client.get("/v1/datasets").json()["items"]
    assert [item["name"] for item in listed] == list(reversed(files))
    assert all(item["preview"] is None for item in listed)  # the list stays small
    shown = client.get(f"/v1/datasets/{ids['sales.csv']}").json()
    assert "North,10.5" in shown["preview"]


@pytest.mark.docker
def test_delete_frees_the_file_unless_an_open_conversation_uses_it(store, serve):
    server = serve(store)
    client = server.client(server.key("oscar"))
    kept = upload(client, "kept.csv", b"a\n1\n").json()["id"]
    gone = upload(client, "gone.csv", b"a\n1\n").json()["id"]
    conversation = client.post("/v1/conversations", json={"datasets": [kept]}).json()["id"]

    in_use = client.delete(f"/v1/datasets/{kept}")
    assert in_use.status_code == 409 and conversation in in_use.json()["detail"]
    assert client.delete(f"/v1/datasets/{gone}").status_code == 204
    assert client.get(f"/v1/datasets/{gone}").status_code == 404
    assert not (server.data_dir / "datasets" / gone).exists()
    assert client.delete(f"/v1/conversations/{conversation}").status_code == 204
    assert client.delete(f"/v1/datasets/{kept}").status_code == 204


@pytest.mark.docker
def test_two_datasets_with_one_name_cannot_share_a_sandbox(store, serve):
    server = serve(store)
    client = server.client(server.key("peggy"))
    one = upload(client, "same.csv", b"a\n1\n").json()["id"]
    two = upload(client, "same.csv", b"a\n2\n").json()["id"]
    clash = client.post("/v1/conversations", json={"datasets": [one, two]})
    assert clash.status_code == 422 and "same.csv" in clash.json()["detail"]
