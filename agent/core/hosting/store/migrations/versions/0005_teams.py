"""Teams and money: a key's team and money budgets, a signed-in person's team, a run's cost.

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    """Add the key's team and money budgets, the identity's team, the run's team and cost."""
    op.add_column("api_keys", sa.Column("team", sa.String(64), nullable=True))
    op.add_column("api_keys", sa.Column("cost_per_day", sa.Float, nullable=True))
    op.add_column("api_keys", sa.Column("cost_per_month", sa.Float, nullable=True))
    op.add_column("oidc_identities", sa.Column("team", sa.String(64), nullable=True))
    op.add_column("runs", sa.Column("team", sa.String(64), nullable=True))
    op.add_column("runs", sa.Column("cost", sa.Float, nullable=False, server_default="0"))
    op.add_column("runs", sa.Column("cost_estimated", sa.Boolean, nullable=False,
                                    server_default=sa.false()))
    op.create_index("ix_runs_team_created", "runs", ["team", "created_at"])


def downgrade() -> None:
    """Drop what `upgrade` added."""
    op.drop_index("ix_runs_team_created", table_name="runs")
    with op.batch_alter_table("runs") as runs:
        runs.drop_column("cost_estimated")
        runs.drop_column("cost")
        runs.drop_column("team")
    with op.batch_alter_table("oidc_identities") as identities:
        identities.drop_column("team")
    with op.batch_alter_table("api_keys") as keys:
        keys.drop_column("cost_per_month")
        keys.drop_column("cost_per_day")
        keys.drop_column("team")
