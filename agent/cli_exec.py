"""Placeholder: commands registered here land with their issue."""

import click


def register(cli: click.Group) -> None:
    """Add this module's commands to the `sbx` group."""
