"""Notes about a dataset that outlive the conversation.

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-04
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    """Create the notes table, looked up by dataset name and author."""
    op.create_table(
        "notes",
        sa.Column("id", sa.String(32), primary_key=True),
        sa.Column("dataset", sa.String(255), nullable=False),
        sa.Column("digest", sa.String(64), nullable=False),
        sa.Column("text", sa.Text, nullable=False),
        sa.Column("author", sa.String(80), nullable=False),
        sa.Column("team", sa.String(64), nullable=True),
        sa.Column("by_model", sa.Boolean, nullable=False),
        sa.Column("created_at", sa.Float, nullable=False),
        sa.Column("updated_at", sa.Float, nullable=False),
    )
    op.create_index("ix_notes_dataset_author", "notes", ["dataset", "author"])


def downgrade() -> None:
    """Drop the notes table."""
    op.drop_index("ix_notes_dataset_author", table_name="notes")
    op.drop_table("notes")
