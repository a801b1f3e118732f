"""``handoff schemas check``: the event schemas' compatibility."""

from __future__ import annotations

import typer

from handoff.cli._common import console

schemas_app = typer.Typer(no_args_is_help=True, help="The Avro event schemas in schemas/.")


@schemas_app.command("check")
def schemas_check() -> None:
    """Fail if the newest event schema cannot read data of every retained version."""
    from handoff.core.events import retained_versions
    from handoff.core.schema_compat import problems

    versions = retained_versions()
    found = problems(versions)
    for problem in found:
        console.print(f"[red]incompatible[/red]: {problem}")
    if found:
        raise typer.Exit(1)
    console.print(
        f"schemas ok: v{versions[-1].version} reads "
        + ", ".join(f"v{v.version}" for v in versions)
        + " (BACKWARD_TRANSITIVE)"
    )
