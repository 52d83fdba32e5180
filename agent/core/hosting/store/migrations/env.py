"""Alembic's environment: migrations run on the connection the service hands over.

`sbx.agent.core.hosting.store.db.Database.migrate` opens the transaction (holding
a lock so that replicas starting together migrate once) and passes its
connection in `config.attributes["connection"]`; nothing here reads a URL.
"""

from __future__ import annotations

from alembic import context

from sbx.agent.core.hosting.store.models import Base

connection = context.config.attributes["connection"]
context.configure(connection=connection, target_metadata=Base.metadata, render_as_batch=True)
with context.begin_transaction():
    context.run_migrations()
