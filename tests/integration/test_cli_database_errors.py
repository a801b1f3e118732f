"""The CLI against a database it cannot log in to: one line that says what to fix,
exit 1, no traceback (a wrong password, a stopped server, a database that is not there)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from psycopg.conninfo import conninfo_to_dict

from handoff.core.settings import HandoffSettings


def _run(url: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "handoff.cli", *args],
        env={**os.environ, "HANDOFF_DATABASE_URL": url},
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip


def _url(settings: HandoffSettings, **change: str) -> str:
    parts = {**conninfo_to_dict(settings.database_url), **change}
    return "postgresql://{user}:{password}@{host}:{port}/{dbname}".format(**parts)


@pytest.mark.parametrize(
    ("change", "says"),
    [
        ({"password": "wrong-password"}, "wrong password"),
        ({"port": "1"}, "is not reachable"),
        ({"dbname": "no_such_database"}, "does not exist"),
    ],
)
@pytest.mark.parametrize("command", [["service", "list"], ["db", "upgrade"]])
def test_a_failed_login_says_what_to_fix(
    migrated: HandoffSettings, change: dict[str, str], says: str, command: list[str]
) -> None:
    done = _run(_url(migrated, **change), *command)
    out = done.stdout + done.stderr
    assert done.returncode == 1, out
    assert "Traceback" not in out and "OperationalError" not in out, out
    assert says in out and "HANDOFF_DATABASE_URL" in out, out
