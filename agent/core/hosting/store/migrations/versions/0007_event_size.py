"""Each event's size, so the storage quota sums sizes instead of reading every event's text.

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-04
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    """Add `events.size` (the length of `data`, filled in for stored events) and its index."""
    op.add_column("events", sa.Column("size", sa.Integer, nullable=False, server_default="0"))
    op.execute("UPDATE events SET size = length(data)")
    op.create_index("ix_events_run_size", "events", ["run_id", "size"])


def downgrade() -> None:
    """Drop the index and `events.size`."""
    op.drop_index("ix_events_run_size", table_name="events")
    op.drop_column("events", "size")
