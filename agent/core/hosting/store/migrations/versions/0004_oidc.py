"""Sign-in through an OpenID Connect provider: pending logins, identities, their sessions.

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    """Create `oidc_logins`, `oidc_identities` and `oidc_sessions`."""
    op.create_table(
        "oidc_logins",
        sa.Column("state_hash", sa.String(64), primary_key=True),
        sa.Column("browser_hash", sa.String(64), nullable=False),
        sa.Column("nonce", sa.String(64), nullable=False),
        sa.Column("verifier", sa.String(128), nullable=False),
        sa.Column("redirect_uri", sa.String(512), nullable=False),
        sa.Column("expires_at", sa.Float, nullable=False, index=True),
    )
    op.create_table(
        "oidc_identities",
        sa.Column("principal", sa.String(80), primary_key=True),
        sa.Column("issuer", sa.String(512), nullable=False),
        sa.Column("subject", sa.String(255), nullable=False),
        sa.Column("role", sa.String(16), nullable=False),
        sa.Column("created_at", sa.Float, nullable=False),
        sa.Column("signed_in_at", sa.Float, nullable=False),
    )
    op.create_table(
        "oidc_sessions",
        sa.Column("token_hash", sa.String(64), primary_key=True),
        sa.Column("principal", sa.String(80), nullable=False, index=True),
        sa.Column("created_at", sa.Float, nullable=False),
        sa.Column("expires_at", sa.Float, nullable=False),
    )


def downgrade() -> None:
    """Drop the three tables."""
    op.drop_table("oidc_sessions")
    op.drop_table("oidc_identities")
    op.drop_table("oidc_logins")
