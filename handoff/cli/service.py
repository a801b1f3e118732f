"""``handoff service add|list|rotate|revoke|remove``: services and their credentials."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.table import Table

from handoff.cli._common import JsonOpt, YesOpt, _admin, _confirm, console, print_json

service_app = typer.Typer(no_args_is_help=True, help="Services and their credentials.")


@service_app.command("add")
def service_add(
    name: Annotated[str, typer.Argument(help="Service name, e.g. review (a-z, 0-9, . _ -).")],
    can_create: Annotated[
        bool, typer.Option("--can-create", help="May create documents (initial assignment).")
    ] = False,
    tenant: Annotated[str, typer.Option("--tenant", help="Tenant the service acts in.")] = (
        "default"
    ),
) -> None:
    """Register a service; its credential is printed once, as the last line."""
    from handoff.core.services import add_service

    with _admin() as conn:
        credential = add_service(conn, name, tenant=tenant, can_create=can_create)
    console.print(
        f"service {name!r} in tenant {tenant!r}"
        + (" (may create documents)" if can_create else "")
        + f"; database role {credential.role}. Keep this credential secret:"
    )
    print(credential.token)


ServiceArg = Annotated[str, typer.Argument(help="The service's name.")]
TenantOpt = Annotated[str, typer.Option("--tenant", help="Tenant the service acts in.")]


@service_app.command("list")
def service_list(
    tenant: Annotated[
        str | None, typer.Option("--tenant", help="Only this tenant (default: all).")
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """Registered services: tenant, role, whether they may create, state, documents owned."""
    import dataclasses

    from handoff.core.services import list_services

    with _admin() as conn:
        found = list_services(conn, tenant)
    if as_json:
        print_json([dataclasses.asdict(s) for s in found])
        return
    table = Table(title="Handoff services")
    for column in ("tenant", "service", "role", "creates", "state", "owns", "created"):
        table.add_column(column)
    for s in found:
        if s.revoked_at:
            state = f"[red]revoked {s.revoked_at:%Y-%m-%d %H:%M}[/red]"
        elif s.rotated_at:
            state = f"rotated {s.rotated_at:%Y-%m-%d %H:%M}"
        else:
            state = "active"
        table.add_row(
            s.tenant, s.name, s.role, "yes" if s.can_create else "no", state,
            str(s.assigned), f"{s.created_at:%Y-%m-%d %H:%M}",
        )  # fmt: skip
    console.print(table)
    console.print(f"{len(found)} service(s)")


@service_app.command("rotate")
def service_rotate(name: ServiceArg, tenant: TenantOpt = "default") -> None:
    """New credential, both ways at once (HTTP secret and database password); printed last.

    The old credential stops working and its open database sessions end.
    Also lifts a revocation.
    """
    from handoff.core.services import rotate_service

    with _admin() as conn:
        credential = rotate_service(conn, name, tenant=tenant)
    console.print(
        f"service {name!r} in tenant {tenant!r} has a new credential; the old one no longer "
        "works. Keep this one secret:"
    )
    print(credential.token)


@service_app.command("revoke")
def service_revoke(name: ServiceArg, tenant: TenantOpt = "default", yes: YesOpt = False) -> None:
    """Block the service's credential both ways at once (rotate issues a new one)."""
    from handoff.core.services import revoke_service

    _confirm(f"Revoke the credential of {name!r} in tenant {tenant!r}?", yes)
    with _admin() as conn:
        ended = revoke_service(conn, name, tenant=tenant)
    console.print(
        f"revoked {name!r} in tenant {tenant!r}: its HTTP secret and database login no longer "
        f"work ({ended} open session(s) ended). `handoff service rotate {name}` issues a new one."
    )


@service_app.command("remove")
def service_remove(name: ServiceArg, tenant: TenantOpt = "default", yes: YesOpt = False) -> None:
    """Unregister a service and drop its role; refused while it owns documents."""
    from handoff.core.services import remove_service

    _confirm(f"Remove service {name!r} from tenant {tenant!r}?", yes)
    with _admin() as conn:
        remove_service(conn, name, tenant=tenant)
    console.print(f"removed {name!r} from tenant {tenant!r}")
