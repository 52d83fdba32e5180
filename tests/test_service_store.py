"""The store: migrations build exactly the models' schema, on SQLite and PostgreSQL; keys are
shown once and stored only as hashes; the OpenAPI document describes the wire types."""

from __future__ import annotations

import subprocess
import threading
import time

import pytest
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.config import Config
from alembic.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import text

import service_support
from sbx.agent.core.config import ServiceQuotas
from sbx.agent.core.hosting.store.db import MIGRATIONS, Database
from sbx.agent.core.hosting.store.keys import create_key
from sbx.agent.core.hosting.store.models import Base, Conversation
from sbx.agent.core.hosting.store.quotas import reserve_conversation, storage_used
from sbx.agent.service.api import ROUTES
from sbx.agent.service.app import ENDPOINT_MODULES
from sbx.agent.service.openapi import openapi_document
from sbx.agent.service.problems import Problem
from sbx.agent.service.web.identities import sign_in
from service_support import SBX, wait_for

store = service_support.store
postgres = service_support.postgres
pg_cluster = service_support.pg_cluster


def _head() -> str:
    """The newest migration (the one a migrated store must be at)."""
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    head = ScriptDirectory.from_config(config).get_current_head()
    assert head is not None
    return head


def test_migrations_build_the_models_schema_once_even_when_replicas_race(store):
    db = Database.open(store)
    try:
        threads = [threading.Thread(target=db.migrate) for _ in range(3)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        db.migrate()  # again: nothing to do
        with db.engine.connect() as connection:
            context = MigrationContext.configure(connection)
            assert compare_metadata(context, Base.metadata) == []
            assert connection.execute(text("SELECT version_num FROM alembic_version")
                                      ).scalars().all() == [_head()]
    finally:
        db.close()


def test_a_store_of_an_earlier_version_gets_its_events_sizes_when_migrated(store):
    """The storage quota sums `events.size`: the migration fills it in for stored events."""
    db = Database.open(store)
    try:
        with db.engine.begin() as connection:
            config = Config()
            config.set_main_option("script_location", str(MIGRATIONS))
            config.attributes["connection"] = connection
            command.upgrade(config, "0006")
            connection.execute(text(
                "INSERT INTO runs (id, kind, principal, status, question, message, cpu_seconds, "
                "created_at, replica_id) VALUES ('r1', 'question', 'alice', 'completed', 'q', '', "
                "0, 1, 'x')"))
            connection.execute(text(
                "INSERT INTO events (run_id, seq, type, data, created_at) VALUES "
                "('r1', 1, 'run_end', '{\"type\": \"run_end\", \"note\": \"d\u00e9j\u00e0\"}', 1)"))
        db.migrate()
        with db.read() as session:
            assert session.scalar(text("SELECT size FROM events")) == 35  # characters
            assert storage_used(session, "alice") == 35 and storage_used(session, "bob") == 0
    finally:
        db.close()


def test_a_key_is_printed_once_stored_as_a_hash_and_revoked_by_name(store, tmp_path):
    def sbx(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*SBX, "keys", *args, "--database", store], capture_output=True,
                              text=True, timeout=60)

    created = sbx("create", "alice", "--role", "admin", "--max-conversations", "2",
                  "--upload-bytes", "10m")
    assert created.returncode == 0, created.stderr
    key = created.stdout.strip()
    assert key.startswith("sbx_") and len(key) > 40 and "\n" not in key
    assert "shown only this once" in created.stderr
    again = sbx("create", "alice")
    assert again.returncode != 0 and "exists already" in again.stderr
    assert sbx("create", "Bad/Name").returncode != 0

    listed = sbx("list")
    assert listed.stdout.startswith("alice\tadmin\tactive")
    assert "max_conversations=2 upload_bytes=10485760" in listed.stdout and key not in listed.stdout
    db = Database.open(store)
    try:
        with db.read() as session:
            rows = [tuple(row) for row in session.execute(text("SELECT * FROM api_keys"))]
    finally:
        db.close()
    assert rows and not any(key in str(value) for row in rows for value in row)
    assert sbx("revoke", "alice").returncode == 0
    assert "\trevoked\t" in sbx("list").stdout
    assert "no key named" in sbx("revoke", "nobody").stderr


def test_the_openapi_document_describes_every_route_and_forbids_unknown_fields():
    assert ENDPOINT_MODULES  # the routes are declared by importing these
    document = openapi_document(ROUTES)
    paths = document["paths"]
    assert {"/v1/datasets", "/v1/conversations", "/v1/conversations/{conversation_id}/questions",
            "/v1/runs/{run_id}/events", "/v1/runs/{run_id}/artifacts/{name}", "/v1/execute"
            } <= set(paths)
    schemas = document["components"]["schemas"]
    assert schemas["CreateConversation"]["additionalProperties"] is False
    assert "text/event-stream" in paths["/v1/runs/{run_id}/events"]["get"]["responses"]["200"][
        "content"]
    upload = paths["/v1/datasets"]["post"]["requestBody"]["content"]
    assert upload["multipart/form-data"]["schema"]["required"] == ["file"]
    assert paths["/healthz"]["get"]["security"] == []
    assert paths["/v1/execute"]["post"]["security"] == [{"bearer": []}]


def _conversation(ident: str, principal: str = "key:zed") -> Conversation:
    return Conversation(id=ident, principal=principal, status="active", replica_id="r",
                        datasets=[], model="m", limits={}, sandbox="none", message="",
                        created_at=time.time(), last_active_at=time.time())


@pytest.mark.parametrize("principal", ["key:zed", "oidc:zed@example.test"])
def test_a_quota_check_waits_for_a_concurrent_reservation_to_commit(postgres, principal):
    """For a key and for a person signed in through the provider (their identity row)."""
    db = Database.open(postgres)
    db.migrate()
    if principal.startswith("key:"):
        create_key(db, "zed")
    else:
        sign_in(db, principal=principal, issuer="https://idp.test", subject="z", role="user",
                ttl_s=60)
    quotas = ServiceQuotas(max_conversations=1)
    reserved = threading.Event()
    outcome: dict[str, object] = {}

    def waiting_on_a_lock() -> bool:
        with db.read() as session:
            return bool(session.scalar(text(
                "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'")))

    def first() -> None:
        with db.write() as session:
            reserve_conversation(session, principal, quotas)
            session.add(_conversation("conv-000000000001", principal))
            session.flush()
            reserved.set()
            outcome["second waited"] = wait_for(waiting_on_a_lock, timeout=30,
                                                what="the second check to wait on the lock")

    def second() -> None:
        reserved.wait(30)
        try:
            with db.write() as session:
                reserve_conversation(session, principal, quotas)
                session.add(_conversation("conv-000000000002", principal))
            outcome["second"] = "reserved"
        except Problem as problem:
            outcome["second"] = problem.status

    threads = [threading.Thread(target=first), threading.Thread(target=second)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    db.close()
    assert outcome == {"second waited": True, "second": 429}
