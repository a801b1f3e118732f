"""``handoff bench``: the side-by-side benchmarks of a checkout."""

from __future__ import annotations

import sys

import typer

from handoff.cli._common import console


def bench(ctx: typer.Context) -> None:
    """Run the side-by-side benchmarks (make bench); arguments go to python -m benchmarks."""
    import subprocess
    from pathlib import Path

    # The benchmarks are not part of the installed package: they run from a
    # checkout (make bench), which is the current directory.
    root = Path.cwd()
    if not (root / "benchmarks" / "__main__.py").exists():
        console.print(
            f"[red]error[/red]: no benchmarks/ in {root}; run it from a Handoff checkout "
            "(make bench)"
        )
        raise typer.Exit(2)
    done = subprocess.run([sys.executable, "-m", "benchmarks", *ctx.args], cwd=root, check=False)
    raise typer.Exit(done.returncode)
