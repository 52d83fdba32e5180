"""`[tools.query_sql]`: the read-only data sources the operator names, and who may query each.

A source is a SQLAlchemy URL (PostgreSQL through psycopg, or a SQLite file), given
in the file (`url`) or, to keep a password out of it, by the name of an environment
variable that holds it (`url_env`). Each source lists the principals that may query
it (`"*"`: everyone); closed by default. The walls a query meets are in
`tools.builtin.sql_engine`; the URL itself never reaches the model or the audit log
(both see the source's name).
"""

from __future__ import annotations

import os
import re

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from sbx.sandbox.limits import Bytes, Seconds

SCHEMES = ("postgresql", "postgresql+psycopg", "sqlite")
"""The URL schemes a source may use: the two engines whose read-only walls are built."""
_SOURCE_NAME = re.compile(r"^[a-z][a-z0-9_]{0,39}$")


class SqlSource(BaseModel):
    """One database the model may read, as the operator named it."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    url: str | None = None
    """SQLAlchemy URL (`postgresql://reader@db/sales`, `sqlite:////srv/data/shop.db`)."""
    url_env: str | None = None
    """Environment variable holding the URL instead (keeps a password out of the file)."""
    principals: list[str] = Field(default_factory=list)
    """Who may query it (the principal as the face authenticated them); `"*"`: everyone."""
    description: str = Field(default="", max_length=500)
    """What is in it, told to the model with the source's name."""

    @model_validator(mode="after")
    def _one_url(self) -> SqlSource:
        if (self.url is None) == (self.url_env is None):
            raise ValueError("a source needs exactly one of url or url_env")
        if self.url is not None:
            check_url(self.url)
        return self

    def resolved_url(self) -> str:
        """The URL to connect to (`ValueError` when `url_env` is unset or not a valid URL)."""
        if self.url is not None:
            return self.url
        value = os.environ.get(self.url_env or "", "")
        if not value:
            raise ValueError(f"environment variable {self.url_env} is not set")
        check_url(value)
        return value

    def allows(self, principal: str) -> bool:
        """Whether `principal` may query this source."""
        return "*" in self.principals or principal in self.principals


def check_url(url: str) -> None:
    """Refuse a URL of an engine whose read-only walls sbx does not build."""
    scheme = url.split(":", 1)[0].lower()
    if scheme not in SCHEMES:
        raise ValueError(f"source URL scheme {scheme!r} is not supported (use one of {SCHEMES})")


class QuerySqlRule(BaseModel):
    """`query_sql`: read-only SQL against the named sources, results as Parquet in `/data`."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    enabled: bool = False
    """Off unless enabled with at least one source."""
    timeout: Seconds | None = None
    """The gate's bound on one call (None: `statement_timeout` plus a grace)."""
    statement_timeout: Seconds = 30.0
    """Seconds the database may spend on one query; the engine cancels it past that."""
    max_rows: int = Field(default=100_000, ge=1, le=10_000_000)
    """Most rows kept from one result; the rest are not fetched and the model is told."""
    max_bytes: Bytes = 64 * 1024 * 1024
    """Most bytes of values kept from one result (estimated while fetching)."""
    max_sql_chars: int = Field(default=20_000, ge=1, le=1_000_000)
    """Longest query accepted, in characters."""
    sources: dict[str, SqlSource] = Field(default_factory=dict)
    """The sources by name (`[tools.query_sql.sources.NAME]`)."""

    @field_validator("sources")
    @classmethod
    def _names(cls, sources: dict[str, SqlSource]) -> dict[str, SqlSource]:
        for name in sources:
            if not _SOURCE_NAME.match(name):
                raise ValueError(f"source name {name!r} must match [a-z][a-z0-9_]{{0,39}}")
        return sources

    @model_validator(mode="after")
    def _enabled_needs_sources(self) -> QuerySqlRule:
        if self.enabled and not self.sources:
            raise ValueError("query_sql is enabled but names no sources")
        return self

    def sources_for(self, principal: str) -> dict[str, SqlSource]:
        """The sources `principal` may query, by name."""
        return {name: src for name, src in self.sources.items() if src.allows(principal)}
