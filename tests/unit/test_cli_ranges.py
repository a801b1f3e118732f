"""Numbers the CLI refuses before anything runs: a port outside 1-65535 (a traceback
from bind() before), a pool of no connections (the API failed to start with one), and
an interval of zero or less (an audit or a purge run in a busy loop before)."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from handoff.cli import app


@pytest.mark.parametrize(
    ("args", "option"),
    [
        (["relay", "--metrics-port", "70000"], "--metrics-port"),
        (["relay", "--metrics-port", "0"], "--metrics-port"),
        (["consume", "x:app", "--metrics-port", "-1"], "--metrics-port"),
        (["consume", "x:app", "--idle-exit", "-1"], "--idle-exit"),
        (["effects", "run", "x:app", "--metrics-port", "65536"], "--metrics-port"),
        (["serve", "--port", "70000"], "--port"),
        (["serve", "--port", "-1"], "--port"),
        (["serve", "--pool-size", "0"], "--pool-size"),
        (["sandbox-provider", "--port", "70000"], "--port"),
        (["audit", "--every", "0"], "--every"),
        (["audit", "--every", "-1"], "--every"),
        (["audit", "--every", "5", "--metrics-port", "70000"], "--metrics-port"),
        (["retention", "run", "--every", "0"], "--every"),
        (["run", "deployment.toml", "--for", "-1"], "--for"),
    ],
)
def test_out_of_range_numbers_are_refused_naming_the_option(args: list[str], option: str) -> None:
    done = CliRunner().invoke(app, args)
    said = " ".join(done.output.split())
    assert done.exit_code == 2, said
    assert f"Invalid value for '{option}'" in said, said
