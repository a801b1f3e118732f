"""``handoff db upgrade``: migrations."""

from __future__ import annotations

from typing import Annotated

import typer

from handoff.cli._common import console
from handoff.core.settings import load_settings

db_app = typer.Typer(no_args_is_help=True, help="Database migrations.")


@db_app.command("upgrade")
def db_upgrade(revision: Annotated[str, typer.Argument(help="Target revision.")] = "head") -> None:
    """Apply migrations to the configured database (HANDOFF_DATABASE_URL)."""
    from handoff.stack.migrate import upgrade

    placed = upgrade(load_settings(), revision)
    for line in placed:
        console.print(f"Citus: {line}")
    console.print(f"database at {revision}")
