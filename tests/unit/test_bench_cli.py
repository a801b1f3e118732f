"""``handoff bench --help`` shows the benchmarks' own options (it used to show only
``--help``, and ``python -m benchmarks --help`` failed on a bare % in a help text)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_bench_help_lists_the_benchmarks_options() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "handoff.cli", "bench", "--help"],
        cwd=ROOT, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    for option in ("--executors", "--hop-rate", "--citus-home", "--rounds"):
        assert option in done.stdout
    assert "tracing (off, sampling 0 and 100 %" in " ".join(done.stdout.split())
