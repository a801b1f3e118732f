"""Finding a Java runtime: version parsing and clear errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from handoff.core.errors import PrerequisiteMissing
from handoff.stack import java


def fake_java(tmp_path: Path, banner: str) -> Path:
    """A stand-in ``java`` script that prints a given version banner (a fake by design)."""
    exe = tmp_path / "java"
    exe.write_text(f"#!/bin/sh\necho '{banner}' >&2\n")
    exe.chmod(0o755)
    java.java_major.cache_clear()
    return exe


@pytest.mark.parametrize(
    ("banner", "major"),
    [
        ('openjdk version "17.0.15" 2025-04-15', 17),
        ('openjdk version "21" 2023-09-19', 21),
        ('java version "1.8.0_402"', 8),
        ("no version here", None),
    ],
)
def test_major_version_parsing_with_fake_java(tmp_path: Path, banner: str, major: int) -> None:
    assert java.java_major(fake_java(tmp_path, banner)) == major


def test_explicit_java_too_old_says_what_to_do_with_fake_java(tmp_path: Path) -> None:
    exe = fake_java(tmp_path, 'openjdk version "17.0.1"')
    with pytest.raises(PrerequisiteMissing, match="Java 21"):
        java.find_java(21, exe, "the registry")


def test_nothing_found_names_the_fix(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(java, "_candidates", lambda: iter(()))
    with pytest.raises(PrerequisiteMissing, match=r"install a JDK .* or use docker compose"):
        java.find_java(17, None, "Kafka")


def test_this_machine_has_runtimes_for_both_parts() -> None:
    java.java_major.cache_clear()
    kafka = java.find_java(17, None, "Kafka")
    registry = java.find_java(21, None, "registry")
    assert (java.java_major(kafka) or 0) >= 17
    assert (java.java_major(registry) or 0) >= 21
