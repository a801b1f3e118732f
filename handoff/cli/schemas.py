"""``handoff schemas check``: the event schemas' compatibility."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

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


@schemas_app.command("asyncapi")
def schemas_asyncapi(
    out: Annotated[
        Path | None, typer.Option("--out", help="Write the document here, not to stdout.")
    ] = None,
    check: Annotated[
        Path | None,
        typer.Option(
            "--check",
            help="Fail if this file (e.g. docs/asyncapi.yaml) is not the document for the "
            "default settings; the make target keeps the committed copy current this way.",
        ),
    ] = None,
    defaults: Annotated[
        bool,
        typer.Option(
            "--defaults", help="The document for the default settings, not for HANDOFF_*."
        ),
    ] = False,
) -> None:
    """The AsyncAPI 3 document of the topics (addresses and routes from HANDOFF_* and
    HANDOFF_RELAY_*; the API serves the same at /asyncapi.yaml)."""
    from handoff.core.settings import HandoffSettings, load_settings
    from handoff.relay import asyncapi
    from handoff.relay.settings import RelaySettings

    if check is not None or defaults:
        # model_construct: the fields' defaults, whatever the environment says.
        text = asyncapi.as_yaml(
            asyncapi.document(HandoffSettings.model_construct(), RelaySettings.model_construct())
        )
    else:
        text = asyncapi.as_yaml(asyncapi.document(load_settings(), RelaySettings()))
    if check is not None:
        if not check.is_file() or check.read_text() != text:
            console.print(
                f"[red]{check} is not the current AsyncAPI document[/red]; write it with: "
                f"handoff schemas asyncapi --defaults --out {check}"
            )
            raise typer.Exit(1)
        console.print(f"{check} is current")
        return
    if out is None:
        typer.echo(text, nl=False)
    else:
        out.write_text(text)
        console.print(f"wrote {out}")
