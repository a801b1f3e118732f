"""What the ``handoff`` commands share: the console, the admin connection, confirmations."""

from __future__ import annotations

import json
import sys
from datetime import datetime, timedelta
from decimal import Decimal
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console

from handoff.core.settings import load_settings

if TYPE_CHECKING:
    import psycopg

console = Console(stderr=True)

YesOpt = Annotated[bool, typer.Option("--yes", "-y", help="Do not ask for confirmation.")]
JsonOpt = Annotated[
    bool, typer.Option("--json", help="Print JSON on stdout, for scripts, instead of a table.")
]


def _admin() -> psycopg.Connection[Any]:
    """The admin role's connection (CREATEROLE), autocommit: each step its own transaction."""
    import psycopg

    return psycopg.connect(load_settings().database_url, autocommit=True)


def _confirm(question: str, yes: bool) -> None:
    if yes:
        return
    if not sys.stdin.isatty():
        console.print(f"[red]refused[/red]: {question} Pass --yes to confirm without a terminal.")
        raise typer.Exit(2)
    if not typer.confirm(question):
        raise typer.Exit(1)


def print_rows(title: str, columns: tuple[str, ...], rows: list[list[str]]) -> None:
    """A table of rows on stdout; piped output is not cut to the terminal's width."""
    from rich.table import Table

    table = Table(title=title)
    for column in columns:
        table.add_column(column)
    for row in rows:
        table.add_row(*row)
    Console(width=None if sys.stdout.isatty() else 240).print(table)


def _plain(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, bytes | memoryview):
        return bytes(value).hex()
    if isinstance(value, Decimal):
        return int(value) if value == value.to_integral_value() else float(value)
    if isinstance(value, timedelta):
        return value.total_seconds()
    return str(value)


def print_json(value: Any) -> None:
    """``value`` as JSON on stdout: times in ISO 8601, bytes in hex, one document."""
    print(json.dumps(value, default=_plain, indent=2, ensure_ascii=False))


def cell(value: Any) -> str:
    """A value in a table cell: times to the second, None as a dash."""
    if isinstance(value, datetime):
        return value.isoformat(timespec="seconds")
    return "-" if value is None else str(value)
