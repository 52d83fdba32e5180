"""A per-key override of the storage quota (datasets, artifacts and events stored).

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    """Add `api_keys.storage_bytes`."""
    op.add_column("api_keys", sa.Column("storage_bytes", sa.BigInteger, nullable=True))


def downgrade() -> None:
    """Drop `api_keys.storage_bytes`."""
    op.drop_column("api_keys", "storage_bytes")
