"""`query_sql` reads the operator's databases, read-only, into `/data`.

A real SQLite file and a real PostgreSQL cluster (the throwaway one of
`service_support`), the real gate and audit log, and the real drop directory
the workspace uses. The walls: a write attempt is refused (and the data is
intact), a slow query is cut by the statement timeout, a huge result is capped
by rows and by bytes, and a source is offered only to the principals it lists.
The end-to-end runs are in `test_query_sql_sandbox.py`.
"""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
import sqlalchemy
from pydantic import ValidationError

import service_support
from conftest import wait_until
from sbx.sandbox.datadrop import DropDir
from sbx.tools.context import ToolContext
from sbx.tools.gate import ToolGate, build_gate
from sbx.tools.policy import Policy
from tools_support import events, open_log

pg_cluster = service_support.pg_cluster


class Drop:
    """The workspace's drop adapter, minus the sandbox: files land in a real `DropDir`."""

    def __init__(self, root: Path) -> None:
        self.dir = DropDir.create(root, "queries")

    def put(self, name: str, data: bytes) -> str:
        self.dir.put(name, data)
        return f"/data/queries/{name}"


def sqlite_db(tmp_path: Path) -> Path:
    path = tmp_path / "shop.db"
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE sales (region TEXT, amount INTEGER)")
        conn.executemany("INSERT INTO sales VALUES (?, ?)",
                         [("north", 3), ("south", 4), ("north", 5)])
    return path


def pg_db(cluster: service_support.PgCluster) -> str:
    url = cluster.new_database()
    engine = sqlalchemy.create_engine(url.replace("postgresql://", "postgresql+psycopg://"))
    with engine.begin() as conn:
        conn.exec_driver_sql("CREATE TABLE sales (region text, amount int)")
        conn.exec_driver_sql("INSERT INTO sales VALUES ('north', 3), ('south', 4), ('north', 5)")
    engine.dispose()
    return url


def policy(sources: dict[str, Any], **rule: Any) -> Policy:
    return Policy.model_validate(
        {"tools": {"query_sql": {"enabled": True, "sources": sources, **rule}}}
    )


def gate_for(tmp_path: Path, pol: Policy, principal: str = "alice") -> tuple[ToolGate, Drop]:
    drop = Drop(tmp_path / "data-root")
    context = ToolContext(run_id="run-sql", runner=None, principal=principal, data_drop=drop)
    gate = build_gate(pol, context=context, audit=open_log(tmp_path / "audit.jsonl"))
    return gate, drop


def query(gate: ToolGate, source: str, sql: str, **more: Any) -> Any:
    arguments = json.dumps({"source": source, "sql": sql, **more})
    return gate.call(name="query_sql", arguments=arguments, call_id="c1")


@pytest.fixture(params=["sqlite", "postgresql"])
def source_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{sqlite_db(tmp_path)}"
    return pg_db(request.getfixturevalue("pg_cluster"))


def test_a_query_lands_as_parquet_and_is_audited_with_its_sql_and_rows(tmp_path, source_url):
    gate, drop = gate_for(tmp_path, policy({"shop": {"url": source_url, "principals": ["*"]}}))
    sql = "SELECT region, SUM(amount) AS total FROM sales GROUP BY region ORDER BY region"
    outcome = query(gate, "shop", sql, name="totals")
    gate.close()
    assert outcome.status == "ok", outcome.text
    assert "2 rows x 2 columns" in outcome.text and "/data/queries/totals.parquet" in outcome.text
    assert "region: string" in outcome.text
    table = pq.read_table(drop.dir.path / "totals.parquet")
    assert table.to_pydict() == {"region": ["north", "south"], "total": [8, 4]}
    [done] = events(tmp_path / "audit.jsonl", "outcome")
    assert (done["sql"], done["rows"], done["principal"], done["source"]) == (
        sql, 2, "alice", "shop")
    assert source_url not in (tmp_path / "audit.jsonl").read_text()  # the URL is never logged


WRITES = [
    "DELETE FROM sales",
    "INSERT INTO sales VALUES ('east', 1)",
    "SELECT 1; DELETE FROM sales",
    "UPDATE sales SET amount = 0",
    "DROP TABLE sales",
]


@pytest.mark.parametrize("sql", WRITES)
def test_a_write_attempt_is_refused_and_the_data_is_intact(tmp_path, source_url, sql):
    gate, _ = gate_for(tmp_path, policy({"shop": {"url": source_url, "principals": ["*"]}}))
    refused = query(gate, "shop", sql)
    after = query(gate, "shop", "SELECT COUNT(*) AS n FROM sales")
    gate.close()
    assert refused.status == "error" and "read-only SELECT" in refused.text
    assert after.status == "ok" and "\n  3\n" in after.text + "\n", after.text


def test_sqlite_refuses_attach_and_pragma(tmp_path):
    url = f"sqlite:///{sqlite_db(tmp_path)}"
    gate, _ = gate_for(tmp_path, policy({"shop": {"url": url, "principals": ["*"]}}))
    attach = query(gate, "shop", f"ATTACH DATABASE '{tmp_path / 'new.db'}' AS other")
    pragma = query(gate, "shop", "PRAGMA writable_schema = ON")
    gate.close()
    assert attach.status == pragma.status == "error"
    assert "not authorized" in attach.text and not (tmp_path / "new.db").exists()


def test_postgresql_refuses_a_data_modifying_cte_and_turning_read_only_off(tmp_path, pg_cluster):
    url = pg_db(pg_cluster)
    gate, _ = gate_for(tmp_path, policy({"pg": {"url": url, "principals": ["*"]}}))
    cte = query(gate, "pg", "WITH gone AS (DELETE FROM sales RETURNING *) SELECT * FROM gone")
    flip = query(gate, "pg", "SELECT set_config('transaction_read_only', 'off', false)")
    after = query(gate, "pg", "SELECT COUNT(*) AS n FROM sales")
    gate.close()
    assert cte.status == flip.status == "error"
    assert "data-modifying" in cte.text and "read-write" in flip.text
    assert "\n  3" in after.text


SLOW = {
    "sqlite": "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) "
              "SELECT MAX(x) FROM (SELECT x FROM c LIMIT 100000000000)",
    "postgresql": "SELECT pg_sleep(30)",
}


def test_a_slow_query_is_cut_by_the_statement_timeout(tmp_path, source_url):
    kind = "sqlite" if source_url.startswith("sqlite") else "postgresql"
    pol = policy({"shop": {"url": source_url, "principals": ["*"]}}, statement_timeout="1s")
    gate, _ = gate_for(tmp_path, pol)
    outcome = query(gate, "shop", SLOW[kind])
    gate.close()
    assert outcome.status == "error"
    assert ("statement timeout" if kind == "postgresql" else "interrupted") in outcome.text
    assert outcome.duration_s < 25  # cut by the database's own bound, far before the query ends


HUGE = {
    "sqlite": "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) "
              "SELECT x, printf('%.200c', 'x') AS pad FROM c",
    # generate_series in the select list streams; in FROM it would be materialized first
    "postgresql": "SELECT x, repeat('x', 200) AS pad "
                  "FROM (SELECT generate_series(1, 100000000) AS x) AS s",
}


@pytest.mark.parametrize(("cap", "key"), [({"max_rows": 1000}, "max_rows"),
                                          ({"max_bytes": "64k"}, "max_bytes")])
def test_a_huge_result_is_capped(tmp_path, source_url, cap, key):
    kind = "sqlite" if source_url.startswith("sqlite") else "postgresql"
    gate, drop = gate_for(tmp_path, policy({"shop": {"url": source_url, "principals": ["*"]}},
                                           **cap))
    outcome = query(gate, "shop", HUGE[kind], name="big")
    gate.close()
    assert outcome.status == "ok", outcome.text
    assert "cut at" in outcome.text and f"tools.query_sql.{key}" in outcome.text
    rows = pq.read_table(drop.dir.path / "big.parquet").num_rows
    assert rows == 1000 if key == "max_rows" else 0 < rows < 64 * 1024 // 200
    [done] = events(tmp_path / "audit.jsonl", "outcome")
    assert (done["rows"], done["cut"]) == (rows, f"tools.query_sql.{key}")


def test_sources_follow_the_principal(tmp_path):
    url = f"sqlite:///{sqlite_db(tmp_path)}"
    pol = policy({"shop": {"url": url, "principals": ["alice"]},
                  "hr": {"url": url, "principals": ["carol"]}})
    alice, _ = gate_for(tmp_path / "a", pol, principal="alice")
    bob, _ = gate_for(tmp_path / "b", pol, principal="bob")
    schema = next(s for s in alice.schemas() if s["function"]["name"] == "query_sql")
    denied = query(alice, "hr", "SELECT 1")
    alice.close()
    offered_to_bob = bob.enabled_names()
    bob.close()
    assert "- shop: SQLite" in schema["function"]["description"]
    assert "hr" not in schema["function"]["description"]
    assert denied.status == "denied" and denied.rule == "tools.query_sql.sources.hr.principals"
    assert "query_sql" not in offered_to_bob


def test_the_policy_refuses_what_it_cannot_wall():
    with pytest.raises(ValidationError, match="names no sources"):
        policy({})
    with pytest.raises(ValidationError, match="not supported"):
        policy({"db": {"url": "mysql://root@localhost/x", "principals": ["*"]}})
    with pytest.raises(ValidationError, match="exactly one of url or url_env"):
        policy({"db": {"principals": ["*"]}})


# ------------------------------------------------------------------ bounds per call

PEAK = """
import json, sys
from sbx.tools.builtin.sql_engine import QueryLimits, run_query

def status(key):
    for line in open("/proc/self/status"):
        if line.startswith(key + ":"):
            return int(line.split()[1]) * 1024

limits = QueryLimits(timeout_s=120, max_rows=100_000, max_bytes=1 << 20)
run_query(sys.argv[1], "SELECT 1 AS warm", limits)
with open("/proc/self/clear_refs", "w") as clear:  # the peak (VmHWM) starts again from here
    clear.write("5")
before = status("VmRSS")
result = run_query(sys.argv[1], sys.argv[2], limits)
print(json.dumps({"growth": status("VmHWM") - before, "rows": result.table.num_rows,
                  "cut": result.cut}))
"""
WIDE = {  # two small rows, then ten of 40 MB each
    "sqlite": "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 12) "
              "SELECT x, CASE WHEN x <= 2 THEN 'small' ELSE zeroblob(40000000) END AS v FROM c",
    "postgresql": "SELECT x, repeat('y', CASE WHEN x <= 2 THEN 5 ELSE 40000000 END) AS v "
                  "FROM generate_series(1, 12) AS x",
}


def test_wide_rows_are_cut_before_the_server_holds_them(tmp_path, source_url):
    """With max_bytes 1 MiB, ten 40 MB rows grow the process by a small multiple of the cap."""
    kind = "sqlite" if source_url.startswith("sqlite") else "postgresql"
    done = subprocess.run([sys.executable, "-c", PEAK, source_url, WIDE[kind]],
                          capture_output=True, text=True, timeout=180, check=False)
    assert done.returncode == 0, done.stderr
    measured = json.loads(done.stdout)
    assert measured["cut"] == "tools.query_sql.max_bytes"
    assert 1 <= measured["rows"] <= 2  # SQLite reads a row ahead: the second small one may go
    assert measured["growth"] < 8 * 1024 * 1024, measured  # 400 MB and more when held first


def test_a_stored_value_over_the_cap_is_refused_before_it_is_read(tmp_path):
    path = tmp_path / "blobs.db"
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE files (name TEXT, body BLOB)")
        conn.executemany("INSERT INTO files VALUES (?, zeroblob(?))",
                         [("a", 10), ("b", 10), ("c", 10), ("big", 3_000_000)])
    gate, drop = gate_for(tmp_path, policy({"f": {"url": f"sqlite:///{path}",
                                                  "principals": ["*"]}}, max_bytes="1m"))
    cut = query(gate, "f", "SELECT name, body FROM files ORDER BY rowid", name="files")
    alone = query(gate, "f", "SELECT body FROM files WHERE name = 'big'")
    gate.close()
    assert cut.status == "ok" and "tools.query_sql.max_bytes" in cut.text, cut.text
    assert pq.read_table(drop.dir.path / "files.parquet").column("name").to_pylist() == ["a", "b"]
    assert alone.status == "error" and "larger than tools.query_sql.max_bytes" in alone.text


def sessions(url: str) -> list[Any]:
    """The other sessions on the test's database, with what they run (a cursor's `FETCH`)."""
    engine = sqlalchemy.create_engine(url.replace("postgresql://", "postgresql+psycopg://"))
    with engine.connect() as conn:
        running = conn.exec_driver_sql(
            "SELECT state, query FROM pg_stat_activity WHERE datname = current_database() "
            "AND pid <> pg_backend_pid()").all()
    engine.dispose()
    return list(running)


LIFTED = ("SELECT set_config('statement_timeout', '0', true) AS lifted, "
          "CASE WHEN x > 1000 THEN pg_sleep(30) END AS slept FROM generate_series(1, 1200) AS x")
"""Lifts the session's timeout in the first fetches; a later one (past a batch of 1000 rows
whatever the batch sizes) sleeps under no timeout of the session's."""


def test_a_query_that_lifts_its_own_timeout_is_cancelled_at_the_deadline(tmp_path, pg_cluster):
    url = pg_db(pg_cluster)
    pol = policy({"pg": {"url": url, "principals": ["*"]}}, statement_timeout="2s")
    gate, _ = gate_for(tmp_path, pol)
    outcome = query(gate, "pg", LIFTED)
    gate.close()
    running = sessions(url)
    assert running == []  # the statement was cancelled and its connection closed
    assert outcome.status == "error" and "statement timeout of 2 s" in outcome.text, outcome.text
    assert outcome.duration_s < 2 + 4  # the gate's own bound (2 s + 5 s grace) never came


def test_a_call_bounded_below_its_statement_timeout_cancels_its_statement(tmp_path, pg_cluster):
    url = pg_db(pg_cluster)
    pol = policy({"pg": {"url": url, "principals": ["*"]}}, statement_timeout="30s",
                 timeout="1s")
    gate, _ = gate_for(tmp_path, pol)
    outcome = query(gate, "pg", "SELECT pg_sleep(30) AS slept")
    gate.close()
    running = sessions(url)
    assert running == []  # not abandoned to run on: cancelled before the gate gave up (6 s)
    assert outcome.status == "error" and "statement timeout of 1 s" in outcome.text, outcome.text


def test_a_cancelled_run_cancels_its_query_at_once(tmp_path, pg_cluster):
    url = pg_db(pg_cluster)
    gate, _ = gate_for(tmp_path, policy({"pg": {"url": url, "principals": ["*"]}},
                                        statement_timeout="60s"))
    outcomes: list[Any] = []
    caller = threading.Thread(target=lambda: outcomes.append(
        query(gate, "pg", "SELECT pg_sleep(30) AS slept")))
    caller.start()
    assert wait_until(lambda: sessions(url) != [], 20)
    gate.cancel()
    caller.join(20)
    ended = wait_until(lambda: sessions(url) == [], 5)
    gate.close()
    assert outcomes and outcomes[0].status == "cancelled", outcomes
    assert ended  # the statement was cancelled with the run, not left for its 60 s
