"""The service's store: SQLAlchemy models, the database, API keys, Alembic migrations.

It sits beside the core, not in a face (DESIGN.md): `sbx serve` keeps its
runs, conversations, quotas and keys here (SQLite by default, PostgreSQL for
replicas), and the CLI's `sbx serve keys` administers the same tables.
"""
