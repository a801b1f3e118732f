"""``handoff outbox``: parked outbox rows, listed and unparked once repaired."""

from __future__ import annotations

from typing import Annotated

import typer

from handoff.cli._common import (
    JsonOpt,
    YesOpt,
    _admin,
    _confirm,
    cell,
    console,
    print_json,
    print_rows,
)

outbox_app = typer.Typer(
    no_args_is_help=True,
    help="Outbox rows the relay parked (it could not encode them) and their repair.",
)


@outbox_app.command("parked")
def outbox_parked(
    tenant: Annotated[str | None, typer.Option(help="Only this tenant.")] = None,
    limit: Annotated[int, typer.Option(min=1, help="At most this many, oldest first.")] = 100,
    as_json: JsonOpt = False,
) -> None:
    """Parked rows with their reasons; rows held behind one say so."""
    from handoff.relay.parked import list_parked

    with _admin() as conn:
        rows = list_parked(conn, tenant=tenant, limit=limit)
    if as_json:
        print_json(rows)
        return
    columns = ("id", "tenant", "document", "v", "type", "parked", "reason")
    print_rows("parked outbox rows", columns, [[cell(r[k]) for k in (
        "id", "tenant_id", "document_id", "version", "event_type", "parked_at", "park_reason"
    )] for r in rows])  # fmt: skip


@outbox_app.command("unpark")
def outbox_unpark(
    tenant: Annotated[str, typer.Argument(help="The document's tenant.")],
    document: Annotated[str, typer.Argument(help="The document whose rows to publish again.")],
    yes: YesOpt = False,
) -> None:
    """Publish a document's parked rows again, in order, after repairing them."""
    from handoff.relay.parked import unpark

    _confirm(f"Publish the parked outbox rows of {tenant}/{document} again?", yes)
    with _admin() as conn:
        parked, again = unpark(conn, tenant, document)
    console.print(
        f"{tenant}/{document}: {parked} parked row(s) unparked, {again} row(s) queued for the "
        "relay in their order; a row that still cannot be encoded is parked again",
        highlight=False,
    )
