"""The first schema: keys, datasets, conversations, runs, events, artifacts, replicas.

Revision ID: 0001
Revises:
Create Date: 2025-01-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    """Create every table of the service."""
    _keys_and_datasets()
    _conversations_and_runs()
    _events_artifacts_and_replicas()


def _keys_and_datasets() -> None:
    op.create_table(
        "api_keys",
        sa.Column("name", sa.String(64), primary_key=True),
        sa.Column("key_hash", sa.String(64), nullable=False, unique=True),
        sa.Column("role", sa.String(16), nullable=False),
        sa.Column("created_at", sa.Float, nullable=False),
        sa.Column("revoked_at", sa.Float, nullable=True),
        sa.Column("max_conversations", sa.Integer, nullable=True),
        sa.Column("runs_per_hour", sa.Integer, nullable=True),
        sa.Column("cpu_seconds_per_day", sa.Float, nullable=True),
        sa.Column("dataset_bytes", sa.BigInteger, nullable=True),
        sa.Column("upload_bytes", sa.BigInteger, nullable=True),
    )
    op.create_table(
        "datasets",
        sa.Column("id", sa.String(32), primary_key=True),
        sa.Column("principal", sa.String(80), nullable=False, index=True),
        sa.Column("name", sa.String(128), nullable=False),
        sa.Column("format", sa.String(16), nullable=False),
        sa.Column("size", sa.BigInteger, nullable=False),
        sa.Column("sha256", sa.String(64), nullable=False),
        sa.Column("preview", sa.Text, nullable=False),
        sa.Column("created_at", sa.Float, nullable=False),
    )


def _conversations_and_runs() -> None:
    op.create_table(
        "conversations",
        sa.Column("id", sa.String(32), primary_key=True),
        sa.Column("principal", sa.String(80), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("replica_id", sa.String(128), nullable=False, index=True),
        sa.Column("datasets", sa.JSON, nullable=False),
        sa.Column("model", sa.String(128), nullable=False),
        sa.Column("limits", sa.JSON, nullable=False),
        sa.Column("sandbox", sa.String(16), nullable=False),
        sa.Column("message", sa.Text, nullable=False),
        sa.Column("created_at", sa.Float, nullable=False),
        sa.Column("last_active_at", sa.Float, nullable=False),
        sa.Column("closed_at", sa.Float, nullable=True),
        sa.Index("ix_conversations_principal_status", "principal", "status"),
    )
    op.create_table(
        "runs",
        sa.Column("id", sa.String(32), primary_key=True),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("principal", sa.String(80), nullable=False),
        sa.Column("conversation_id", sa.String(32), nullable=True, index=True),
        sa.Column("replica_id", sa.String(128), nullable=False, index=True),
        sa.Column("status", sa.String(16), nullable=False, index=True),
        sa.Column("question", sa.Text, nullable=False),
        sa.Column("answer", sa.Text, nullable=True),
        sa.Column("message", sa.Text, nullable=False),
        sa.Column("result", sa.JSON, nullable=True),
        sa.Column("cpu_seconds", sa.Float, nullable=False),
        sa.Column("created_at", sa.Float, nullable=False),
        sa.Column("started_at", sa.Float, nullable=True),
        sa.Column("ended_at", sa.Float, nullable=True),
        sa.Index("ix_runs_principal_created", "principal", "created_at"),
    )


def _events_artifacts_and_replicas() -> None:
    op.create_table(
        "events",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("run_id", sa.String(32), nullable=False),
        sa.Column("seq", sa.Integer, nullable=False),
        sa.Column("type", sa.String(32), nullable=False),
        sa.Column("data", sa.Text, nullable=False),
        sa.Column("created_at", sa.Float, nullable=False),
        sa.UniqueConstraint("run_id", "seq", name="uq_events_run_seq"),
    )
    op.create_table(
        "artifacts",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("run_id", sa.String(32), nullable=False, index=True),
        sa.Column("principal", sa.String(80), nullable=False),
        sa.Column("name", sa.String(512), nullable=False),
        sa.Column("path", sa.Text, nullable=False),
        sa.Column("size", sa.BigInteger, nullable=False),
        sa.Column("content_type", sa.String(128), nullable=False),
        sa.UniqueConstraint("run_id", "name", name="uq_artifacts_run_name"),
    )
    op.create_table(
        "replicas",
        sa.Column("id", sa.String(128), primary_key=True),
        sa.Column("advertise_url", sa.String(512), nullable=False),
        sa.Column("hostname", sa.String(255), nullable=False),
        sa.Column("pid", sa.Integer, nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("started_at", sa.Float, nullable=False),
        sa.Column("heartbeat_at", sa.Float, nullable=False),
    )


def downgrade() -> None:
    """Drop every table of the service."""
    for table in ("replicas", "artifacts", "events", "runs", "conversations", "datasets",
                  "api_keys"):
        op.drop_table(table)
