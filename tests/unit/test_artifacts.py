"""Maven-backed downloads: progress reporting, failures, and the completion marker."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from rich.console import Console

from handoff.core.errors import DownloadFailed, PrerequisiteMissing
from handoff.stack import artifacts


def fake_maven(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, script: str) -> None:
    """Put a stand-in ``mvn`` (a fake by design) first on PATH."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    mvn = bin_dir / "mvn"
    mvn.write_text("#!/bin/sh\n" + script)
    mvn.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")


def test_sizes_are_parsed() -> None:
    assert artifacts._size_bytes("3.9 kB") == 3900
    assert artifacts._size_bytes("158 MB") == 158e6


def test_progress_is_summarised_with_fake_maven(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_maven(
        tmp_path,
        monkeypatch,
        "echo 'Downloaded from central: https://r/x/a-1.pom (3.9 kB at 12 kB/s)'\n"
        "printf 'Progress (1): 1/2 MB\\r'\n"
        "echo 'Downloaded from central: https://r/x/a-1.jar (2.1 MB at 9 MB/s)'\n",
    )
    out = io.StringIO()
    artifacts._run_maven(["x"], "thing", Console(file=out, width=200))
    assert "fetched 2 files (2.1 MB)" in out.getvalue()
    assert "https://r/x" not in out.getvalue()  # one summary, not a line per file


def test_failure_shows_mavens_last_lines_with_fake_maven(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_maven(tmp_path, monkeypatch, "echo '[ERROR] Could not resolve artifact x:y:1'\nexit 1\n")
    with pytest.raises(DownloadFailed, match="Could not resolve artifact x:y:1"):
        artifacts._run_maven(["x"], "thing", Console(file=io.StringIO()))


def test_missing_maven_says_what_to_install(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(PrerequisiteMissing, match="install Maven"):
        artifacts._run_maven(["x"], "thing", Console(file=io.StringIO()))


def test_a_complete_cache_is_used_without_maven(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # no mvn: must not be needed
    lib = tmp_path / "kafka-9.9.9" / "lib"
    lib.mkdir(parents=True)
    (tmp_path / "kafka-9.9.9" / ".complete").touch()
    assert artifacts.kafka_lib(tmp_path, "9.9.9", Console(file=io.StringIO())) == lib
    (tmp_path / "kafka-9.9.9" / ".complete").unlink()  # half-written: redone, so Maven needed
    with pytest.raises(PrerequisiteMissing):
        artifacts.kafka_lib(tmp_path, "9.9.9", Console(file=io.StringIO()))
