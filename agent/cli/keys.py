"""`sbx keys create|list|revoke`: the API keys of `sbx serve`, in the same store it uses.

`create` prints the new key once, on stdout (everything else goes to
stderr, so `KEY=$(sbx keys create alice)` works); only its SHA-256 is kept.
Quota flags override the policy's `[service.quotas]` for that key.
`revoke` takes effect at the key's next request (401).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import click

from sbx.agent import (
    Database,
    KeyAdminError,
    StoreError,
    create_key,
    data_dir,
    database_url,
    list_keys,
    parse_size,
    revoke_key,
)
from sbx.agent.cli.errors import fail


def _store_options(command: Callable[..., Any]) -> Callable[..., Any]:
    command = click.option("--data-dir", type=click.Path(path_type=Path, file_okay=False),
                           help="The server's data dir (its SQLite store). [default: "
                           "$SBX_DATA_DIR or ./sbx-data]")(command)
    return click.option("--database", metavar="URL", help="The server's database. [default: "
                        "$SBX_DATABASE_URL, else SQLite in the data dir]")(command)


@contextmanager
def _store(database: str | None, directory: Path | None) -> Iterator[Database]:
    root = data_dir(directory, os.environ)
    try:
        db = Database.open(database_url(database, root.resolve(), os.environ))
    except StoreError as exc:
        fail(str(exc))
    try:
        db.migrate()
        yield db
    except (StoreError, KeyAdminError) as exc:
        fail(str(exc))
    finally:
        db.close()


@click.group("keys")
def keys() -> None:
    """Create, list and revoke the API keys of `sbx serve`."""


def _size(ctx: click.Context, param: click.Parameter, value: str | None) -> int | None:
    if value is None:
        return None
    try:
        return parse_size(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None


@keys.command("create")
@click.argument("name")
@click.option("--role", type=click.Choice(["user", "admin"]), default="user", show_default=True)
@click.option("--max-conversations", type=click.IntRange(0), help="Conversations open at once.")
@click.option("--runs-per-hour", type=click.IntRange(0), help="Runs started per rolling hour.")
@click.option("--cpu-seconds-per-day", type=click.FloatRange(0),
              help="Sandbox CPU seconds per rolling 24 hours.")
@click.option("--dataset-bytes", callback=_size, help="Dataset bytes stored, e.g. 2g.")
@click.option("--upload-bytes", callback=_size, help="Largest single upload, e.g. 200m.")
@click.option("--storage-bytes", callback=_size,
              help="Bytes stored: datasets, artifacts and events, e.g. 5g.")
@click.option("--cost-per-day", type=click.FloatRange(0),
              help="Money this key's runs may cost per UTC day ([agent.prices] currency).")
@click.option("--cost-per-month", type=click.FloatRange(0),
              help="Money this key's runs may cost per UTC month.")
@click.option("--team", metavar="TEAM", help="The team the key belongs to ([service.teams]).")
@_store_options
def create(name: str, role: str, team: str | None, database: str | None,
           data_dir: Path | None, **quotas: Any) -> None:
    """Create key NAME (principal key:NAME) and print it once."""
    with _store(database, data_dir) as db:
        key = create_key(db, name, role="admin" if role == "admin" else "user", overrides=quotas,
                         team=team)
    click.echo(key)
    member = f", team {team}" if team else ""
    click.echo(f"sbx: created key {name!r} (principal key:{name}, role {role}{member}); it is "
               "shown only this once", err=True)


@keys.command("list")
@_store_options
def list_command(database: str | None, data_dir: Path | None) -> None:
    """List the keys (never the keys themselves)."""
    with _store(database, data_dir) as db:
        rows = list_keys(db)
    for info in rows:
        created = datetime.fromtimestamp(info.created_at, UTC).strftime("%Y-%m-%d %H:%M")
        state = "revoked" if info.revoked_at else "active"
        quotas = " ".join(f"{k}={v}" for k, v in info.overrides.items())
        team = f"team={info.team}" if info.team else "team=-"
        click.echo(f"{info.name}\t{info.role}\t{state}\t{team}\tcreated {created}\t{quotas}"
                   .rstrip())
    if not rows:
        click.echo("(no keys; create one with `sbx keys create NAME`)", err=True)


@keys.command("revoke")
@click.argument("name")
@_store_options
def revoke(name: str, database: str | None, data_dir: Path | None) -> None:
    """Revoke key NAME: its next request gets 401."""
    with _store(database, data_dir) as db:
        revoke_key(db, name)
    click.echo(f"sbx: revoked key {name!r}", err=True)


def register(cli: click.Group) -> None:
    """Add the `keys` group to the `sbx` group."""
    cli.add_command(keys)
