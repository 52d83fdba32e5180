"""`upload_dataset` over `/mcp`: only when the policy enables it, capped, checked like the API's."""

from __future__ import annotations

import base64

import anyio
import pytest

import service_support
from mcp_http_support import audit_records, connect, text_of
from sbx.tools.audit_verify import verify_log

serve = service_support.serve
llm = service_support.llm

UPLOADS = {"tools.upload_dataset": {"enabled": True, "max_bytes": "1k"}}
CSV = "region,revenue\nNorth,10\nSouth,12\n"


@pytest.fixture
def sqlite(tmp_path) -> str:
    return f"sqlite:///{tmp_path / 'data' / 'sbx.db'}"


def _upload(client, name: str, content: str, encoding: str = "text"):
    return client.call_tool("upload_dataset",
                            {"name": name, "content": content, "encoding": encoding})


@pytest.mark.docker
def test_an_upload_becomes_a_dataset_the_session_reads_at_once(sqlite, serve):
    server = serve(sqlite, policy=UPLOADS)
    ann, bob = server.key("ann"), server.key("bob")
    read = "import pandas as pd\nprint(pd.read_csv('/data/sales.csv').revenue.sum())"

    async def scenario():
        async with connect(server, ann) as client:
            tools = {t.name for t in (await client.list_tools()).tools}
            stored = await _upload(client, "sales.csv", CSV)
            summed = await client.call_tool("execute_python", {"code": read})
            listed = await client.call_tool("list_data_files", {})
            later = await _upload(client, "later.csv", "a\n1\n")  # code has run: state kept
            seen = await client.call_tool("execute_python", {"code": "import os\n"
                                                             "print(sorted(os.listdir('/data')))"})
        async with connect(server, bob) as other:
            theirs = await other.call_tool("list_data_files", {})
        return tools, stored, summed, listed, later, seen, theirs

    tools, stored, summed, listed, later, seen, theirs = anyio.run(scenario)

    assert "upload_dataset" in tools
    assert not stored.is_error and text_of(stored).startswith("Stored as dataset ds-")
    assert text_of(stored).endswith("It is at /data/sales.csv from the next execute_python call.")
    assert text_of(summed).startswith("[stdout]\n22")
    assert "sales.csv" in text_of(listed)
    assert "after reset_sandbox" in text_of(later)  # the variables are not thrown away for it
    assert text_of(seen).startswith("[stdout]\n['sales.csv']")
    assert "sales.csv" not in text_of(theirs)  # another key's session sees none of it
    datasets = {d["name"] for d in server.client(ann).get("/v1/datasets").json()["items"]}
    assert datasets == {"sales.csv", "later.csv"}
    assert server.client(bob).get("/v1/datasets").json()["items"] == []
    outcomes = [r["data"] for r in audit_records(server)
                if r["event"] == "outcome" and r["data"]["tool"] == "upload_dataset"]
    assert [o["status"] for o in outcomes] == ["ok", "ok"]
    assert verify_log(server.audit_log, key=None).ok


@pytest.mark.docker
def test_an_upload_is_capped_and_checked_like_the_apis(sqlite, serve):
    server = serve(sqlite, policy=UPLOADS)
    key = server.key("ann", dataset_bytes=40)

    async def scenario():
        async with connect(server, key) as client:
            results = {
                "big": await _upload(client, "big.csv", "x" * 1025),
                "big64": await _upload(client, "big.parquet",
                                       base64.b64encode(b"PAR1" + b"0" * 1100).decode(), "base64"),
                "format": await _upload(client, "tool.exe", "MZ"),
                "binary": await _upload(client, "fake.csv", "a,b\n\x00\x01\n"),
                "magic": await _upload(client, "fake.parquet",
                                       base64.b64encode(b"not parquet").decode(), "base64"),
                "base64": await _upload(client, "x.parquet", "***", "base64"),
                "ok": await _upload(client, "../../etc/sales.csv", CSV),
                "again": await _upload(client, "sales.csv", CSV),
                "quota": await _upload(client, "more.csv", CSV),
            }
        return results

    results = anyio.run(scenario)

    for name in ("big", "big64", "format", "binary", "magic", "base64", "again", "quota"):
        assert results[name].is_error, name
    assert "tools.upload_dataset.max_bytes" in text_of(results["big"])
    assert "tools.upload_dataset.max_bytes" in text_of(results["big64"])
    assert "upload one of" in text_of(results["format"])
    assert "NUL" in text_of(results["binary"])
    assert "not a valid parquet file" in text_of(results["magic"])
    assert "not valid base64" in text_of(results["base64"])
    assert "Stored as dataset" in text_of(results["ok"])
    assert "/data/sales.csv" in text_of(results["ok"])  # the name made safe, never a path
    assert "exists in this session already" in text_of(results["again"])
    assert "dataset_bytes" in text_of(results["quota"])
    [stored] = server.client(key).get("/v1/datasets").json()["items"]
    assert stored["name"] == "sales.csv"
