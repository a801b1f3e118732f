"""``handoff bench --help`` shows the benchmarks' own options (it used to show only
``--help``, and ``python -m benchmarks --help`` failed on a bare % in a help text)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

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


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["hop", "--runs", "0"], "argument --runs: 0: give above 0"),
        (["hop", "--hop-rate", "-1"], "argument --hop-rate: -1: give above 0"),
        (["emit", "--clients", "8,0"], "argument --clients: 0: give above 0"),
        (["tracker", "--sizes", "10,x"], "argument --sizes: 'x' is not a number"),
        (["relay", "--rows", "-5"], "argument --rows: -5: give above 0"),
        (["effects", "--provider-latency-ms", "-1"], "--provider-latency-ms: -1: give 0 or more"),
        (["hops"], "no benchmark named hops; there are emit, relay"),
    ],
)
def test_the_benchmarks_refuse_what_they_cannot_run(args: list[str], says: str) -> None:
    # Before: a traceback (no runs, a rate of 0, pgbench at scale 0), or a run of
    # nothing at all for a misspelt name (exit 0, no table).
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks", *args],
        cwd=ROOT, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 2, done.stdout + done.stderr
    assert says in done.stderr
