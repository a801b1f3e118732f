"""The import rules of ``handoff/__init__.py``, checked on every import statement of the
package (module level and inside functions): no arrow runs back up the layering."""

from __future__ import annotations

import ast
from pathlib import Path

import handoff

ROOT = Path(handoff.__file__).parent
ALLOWED: dict[str, set[str]] = {
    "core": set(),
    "telemetry": {"core"},
    "relay": {"core", "telemetry"},
    "consumers": {"core", "telemetry"},
    "tracker": {"core", "telemetry"},
    "stack": {"core"},
    "deploy": {"core", "telemetry"},
    "operate": {"core", "consumers", "telemetry"},
    "rehearsal": {"core", "consumers", "relay", "telemetry"},
    "samples": {"core", "consumers", "telemetry"},
    "sandbox": {"core", "consumers", "telemetry"},
    "dynamo": {"core", "relay", "operate", "telemetry"},
    "migrations": {"core"},
    "chaos": {"core", "consumers", "operate", "stack", "deploy", "telemetry"},
    "cli": {
        "chaos",
        "core",
        "telemetry",
        "relay",
        "consumers",
        "tracker",
        "stack",
        "deploy",
        "operate",
        "rehearsal",
        "samples",
        "sandbox",
        "dynamo",
    },
}


def _imports(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        names = []
        if isinstance(node, ast.ImportFrom) and node.module:
            names = [node.module]
        elif isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        for name in names:
            parts = name.split(".")
            if parts[0] == "handoff" and len(parts) > 1:
                found.add(parts[1])
    return found


def test_no_import_runs_against_the_layering() -> None:
    wrong = []
    for path in ROOT.rglob("*.py"):
        package = path.relative_to(ROOT).parts[0]
        if package not in ALLOWED:
            continue  # the package's own __init__
        for target in _imports(path) - {package} - ALLOWED[package]:
            wrong.append(f"{path.relative_to(ROOT)} imports handoff.{target}")
    assert not wrong, "\n".join(sorted(wrong))


def test_every_package_is_in_the_rules() -> None:
    packages = {p.name for p in ROOT.iterdir() if (p / "__init__.py").exists()}
    assert packages - {"schemas"} <= set(ALLOWED), packages - set(ALLOWED)
