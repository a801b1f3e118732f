"""``handoff db upgrade``: migrations; ``handoff db rebalance``: shards over Citus workers."""

from __future__ import annotations

import dataclasses
from typing import Annotated

import typer

from handoff.cli._common import JsonOpt, console, print_json
from handoff.core.settings import load_settings

db_app = typer.Typer(no_args_is_help=True, help="Database migrations, and Citus rebalances.")


@db_app.command("upgrade")
def db_upgrade(revision: Annotated[str, typer.Argument(help="Target revision.")] = "head") -> None:
    """Apply migrations to the configured database (HANDOFF_DATABASE_URL)."""
    from handoff.stack.migrate import upgrade

    placed = upgrade(load_settings(), revision)
    for line in placed:
        console.print(f"Citus: {line}")
    console.print(f"database at {revision}")


@db_app.command("rebalance")
def db_rebalance(as_json: JsonOpt = False) -> None:
    """On Citus: spread the shards evenly over the workers, online (after adding a worker).

    Places Handoff's per-node parts first (as db upgrade does), starts Citus's background
    rebalance and follows its moves to the end; emits, relays and consumers keep running.
    """
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn

    from handoff.operate.rebalance import rebalance
    from handoff.stack.migrate import upgrade

    settings = load_settings()
    for line in upgrade(settings):  # a new worker's per-node parts, before any shard moves
        console.print(f"Citus: {line}")
    with Progress("moving shard groups", BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=console, transient=True) as bar:  # fmt: skip
        task = bar.add_task("moves", total=None)
        done = rebalance(
            settings, progress=lambda moved, total: bar.update(task, completed=moved,
                                                                      total=total or None)
        )  # fmt: skip
    if as_json:
        print_json(dataclasses.asdict(done))
        return
    if done.job is None:
        console.print("the shards are balanced already: nothing to move")
        return
    console.print(f"rebalanced in {done.seconds:.1f} s: {done.moves} shard group move(s) "
                  f"(Citus job {done.job})")  # fmt: skip
    for node, shards in done.after.items():
        console.print(f"  {node}: {done.before.get(node, 0)} → {shards} shards")
