"""The model queries a database, then its code reads the Parquet.

Real Docker, the real SDK over HTTP to the scripted server, the real gate,
audit log and workspace; only the model is scripted. The second query comes
after code has run, so its file must reach a sandbox that is already running:
in a container created with bind mounts, and in a warm one whose `/data` is a
copy (`LeasedSession.show_file`).
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

import scripted_llm
from conftest import TEST_IMAGE
from sbx.agent.core.app import App
from sbx.agent.core.config import load_config
from sbx.agent.core.conversation import ConversationSpec
from sbx.agent.core.settings import Endpoint
from sbx.agent.testing.scripted_model import assistant, tool_call
from sbx.sandbox.pool import PoolConfig, PoolKey
from sbx.tools.policy import default_policy_path
from scripted_llm import FAKE_KEY
from tools_support import events

llm = scripted_llm.llm
no_real_model = scripted_llm.no_real_model

READ = ("import pandas as pd\n"
        "df = pd.read_parquet('/data/queries/{name}.parquet')\n"
        "print(df.to_dict('list'))")


def policy_with_source(tmp_path: Path, db: Path) -> Path:
    text = default_policy_path().read_text()
    head, table, rest = text.partition("[tools.query_sql]\n")
    text = head + table + rest.replace("enabled = false", "enabled = true", 1)
    text += f'\n[tools.query_sql.sources.shop]\nurl = "sqlite:///{db}"\n'
    text += 'principals = ["os:tester"]\n'
    path = tmp_path / "sbx.toml"
    path.write_text(text)
    return path


@pytest.mark.docker
@pytest.mark.parametrize("warm", [False, True], ids=["created", "warm"])
def test_the_model_queries_and_its_code_reads_the_parquet(llm, tmp_path, engine, warm):
    db = tmp_path / "shop.db"
    with sqlite3.connect(db) as conn:
        conn.execute("CREATE TABLE sales (region TEXT, amount INTEGER)")
        conn.executemany("INSERT INTO sales VALUES (?, ?)", [("north", 3), ("south", 4)])
    llm.script([
        tool_call("query_sql", source="shop", sql="SELECT * FROM sales ORDER BY region",
                  name="sales"),
        tool_call("execute_python", code=READ.format(name="sales")),
        tool_call("query_sql", source="shop", sql="SELECT SUM(amount) AS total FROM sales"),
        tool_call("execute_python", code=READ.format(name="q1") + "\nprint(sorted(__import__("
                                         "'os').listdir('/data/queries')))"),
        assistant("The total is 7."),
    ])
    config = load_config(policy_with_source(tmp_path, db))
    root = tmp_path / "data-root"
    with App.open(config, environ={}, audit_log=tmp_path / "audit.jsonl", image=TEST_IMAGE,
                  pool_config=PoolConfig(size=1 if warm else 0, data_root=root)) as app:
        if warm:
            assert app.pool is not None
            key = PoolKey(image=TEST_IMAGE, limits=config.limits)
            app.pool.warm(key)
            assert app.pool.wait_warm(key)
        spec = ConversationSpec(principal="os:tester", output_root=tmp_path / "o")
        endpoint = Endpoint(base_url=llm.base_url, api_key=FAKE_KEY, model="scripted")
        with app.conversation(spec, endpoint=endpoint, transcript=tmp_path / "c.jsonl") as conv:
            result = conv.ask("What is the total amount?")
            session = conv.workspace._session
            served_warm = session is not None and getattr(session, "data_dir", None) is not None
        stats = app.pool.snapshot() if app.pool is not None else None
    assert (result.status, result.answer) == ("completed", "The total is 7.")
    assert served_warm is warm and (stats is None or stats.hits == int(warm))
    tools = [r.last_tool_message for r in llm.requests[1:]]
    assert "2 rows x 2 columns" in tools[0] and "/data/queries/sales.parquet" in tools[0]
    assert "{'region': ['north', 'south'], 'amount': [3, 4]}" in tools[1]
    assert "1 rows x 1 columns" in tools[2]
    assert "{'total': [7]}" in tools[3] and "['q1.parquet', 'sales.parquet']" in tools[3]
    outcomes = [d for d in events(tmp_path / "audit.jsonl", "outcome") if d["tool"] == "query_sql"]
    assert [(d["sql"], d["rows"], d["principal"]) for d in outcomes] == [
        ("SELECT * FROM sales ORDER BY region", 2, "os:tester"),
        ("SELECT SUM(amount) AS total FROM sales", 1, "os:tester"),
    ]
    assert list(root.iterdir()) == []  # the drop went with its workspace


@pytest.mark.docker
def test_an_mcp_client_queries_and_reads_the_parquet_in_its_session(tmp_path, engine):
    import anyio

    from mcp_support import mcp_client, text_of

    db = tmp_path / "shop.db"
    with sqlite3.connect(db) as conn:
        conn.execute("CREATE TABLE sales (region TEXT, amount INTEGER)")
        conn.executemany("INSERT INTO sales VALUES (?, ?)", [("north", 3), ("south", 4)])
    policy = policy_with_source(tmp_path, db).read_text().replace('["os:tester"]', '["*"]')
    (tmp_path / "sbx.toml").write_text(policy)

    async def scenario() -> tuple[str, str, str]:
        async with mcp_client(tmp_path, "--policy", str(tmp_path / "sbx.toml")) as client:
            listed = [tool.name for tool in (await client.list_tools()).tools]
            queried = await client.call_tool("query_sql", {
                "source": "shop", "sql": "SELECT SUM(amount) AS total FROM sales",
                "name": "total"})
            read = await client.call_tool("execute_python", {"code": READ.format(name="total")})
            refused = await client.call_tool("query_sql", {"source": "shop",
                                                           "sql": "DELETE FROM sales"})
        assert "query_sql" in listed
        return text_of(queried), text_of(read), text_of(refused)

    queried, read, refused = anyio.run(scenario)
    assert "1 rows x 1 columns" in queried and "/data/queries/total.parquet" in queried
    assert "{'total': [7]}" in read
    assert "read-only SELECT" in refused
