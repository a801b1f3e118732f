"""Kafka, ZooKeeper and Kafka Connect jars, Debezium's connector, the Apicurio Registry
distribution and Zipkin's server, resolved by Maven into a cache.

Each artifact lands in ``<cache_dir>/<name>-<version>/`` and is marked
complete only after it was fully written, so an interrupted download is
redone rather than half-used. Maven keeps its own copy in ``~/.m2`` too, so
a second project home or a cleared cache does not download again.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import tarfile
import tempfile
import time
from importlib import resources
from pathlib import Path

from rich.console import Console
from rich.progress import Progress

from handoff.core.errors import DownloadFailed, PrerequisiteMissing

_COMPLETE = ".complete"
_PROGRESS = re.compile(r"Progress \(\d+\): (.+)")
_DOWNLOADED = re.compile(r"Downloaded from [^:]+: (\S+) \(([\d.]+ \w+)")


def _cached(target: Path) -> bool:
    return (target / _COMPLETE).exists()


def _maven() -> str:
    mvn = shutil.which("mvn")
    if mvn is None:
        raise PrerequisiteMissing(
            "Maven (mvn) not found and the Kafka/registry artifacts are not cached yet: "
            "install Maven (e.g. apt-get install maven) or use docker compose"
        )
    return mvn


def _size_bytes(text: str) -> float:
    number, _, unit = text.partition(" ")
    scale = {"B": 1, "kB": 1e3, "KB": 1e3, "MB": 1e6, "GB": 1e9}.get(unit.strip(), 1)
    return float(number) * scale


def _run_maven(args: list[str], what: str, console: Console) -> None:
    """Run Maven with one live status line: files and megabytes so far, current file."""
    cmd = [_maven(), "-Dstyle.color=never", *args]
    tail: list[str] = []
    files, fetched, began = 0, 0.0, time.monotonic()
    with (
        console.status(f"downloading {what} from Maven Central…") as status,
        subprocess.Popen(
            cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
        ) as proc,
    ):
        assert proc.stdout is not None
        buffer = b""
        while chunk := proc.stdout.read1(4096):  # type: ignore[attr-defined]
            buffer += chunk
            *lines, buffer = re.split(rb"[\r\n]", buffer)
            for raw in lines:
                line = raw.decode(errors="replace").strip()
                if not line:
                    continue
                tail = [*tail[-30:], line]
                if match := _PROGRESS.search(line):
                    status.update(f"downloading {what}: {match.group(1)}")
                elif match := _DOWNLOADED.search(line):
                    files += 1
                    fetched += _size_bytes(match.group(2))
                    name = match.group(1).rsplit("/", 1)[-1]
                    status.update(
                        f"downloading {what}: {files} files, {fetched / 1e6:.1f} MB ({name})"
                    )
        code = proc.wait()
    if code != 0:
        raise DownloadFailed(
            f"Maven could not fetch {what} (exit {code}); its last lines:\n" + "\n".join(tail)
        )
    if files:
        console.print(
            f"  fetched {files} file{'s' if files != 1 else ''} ({fetched / 1e6:.1f} MB) "
            f"in {time.monotonic() - began:.1f} s"
        )


def _maven_lib(cache_dir: Path, name: str, version: str, what: str, console: Console) -> Path:
    """Folder with every runtime jar that ``resources/<name>-pom.xml`` names (``lib/*``)."""
    target = cache_dir / f"{name}-{version}"
    if _cached(target):
        return target / "lib"
    console.print(f"Resolving {what} {version} jars (first start only)…")
    pom = resources.files("handoff.stack") / "resources" / f"{name}-pom.xml"
    with tempfile.TemporaryDirectory(dir=_parent(cache_dir)) as tmp, resources.as_file(pom) as p:
        staging = Path(tmp) / name
        lib = staging / "lib"
        _run_maven(
            [
                "-f",
                str(p),
                f"-D{name}.version={version}",
                "dependency:copy-dependencies",
                "-DincludeScope=runtime",
                f"-DoutputDirectory={lib}",
            ],
            f"{what} {version}",
            console,
        )
        _publish(staging, target)
    return target / "lib"


def kafka_lib(cache_dir: Path, version: str, console: Console) -> Path:
    """Folder with every jar the Kafka broker needs (classpath ``lib/*``)."""
    return _maven_lib(cache_dir, "kafka", version, "Apache Kafka", console)


def zookeeper_lib(cache_dir: Path, version: str, console: Console) -> Path:
    """Folder with every jar a ZooKeeper server needs (classpath ``lib/*``)."""
    return _maven_lib(cache_dir, "zookeeper", version, "Apache ZooKeeper", console)


def connect_lib(cache_dir: Path, version: str, console: Console) -> Path:
    """Folder with every jar a Kafka Connect standalone worker needs (``lib/*``)."""
    return _maven_lib(cache_dir, "connect", version, "Kafka Connect", console)


def debezium_plugin(cache_dir: Path, version: str, console: Console) -> Path:
    """A Connect plugin folder holding the Debezium PostgreSQL connector and its jars.

    Connect's ``plugin.path`` names the folder *above* it: each plugin gets its
    own class loader there."""
    return _maven_lib(cache_dir, "debezium", version, "Debezium", console)


def registry_dist(cache_dir: Path, version: str, console: Console) -> Path:
    """Folder of the unpacked Apicurio Registry app (holds ``quarkus-run.jar``)."""
    target = cache_dir / f"apicurio-registry-{version}"
    if _cached(target):
        return target
    console.print(f"Fetching Apicurio Registry {version} (about 160 MB, first start only)…")
    with tempfile.TemporaryDirectory(dir=_parent(cache_dir)) as tmp:
        work = Path(tmp)
        _run_maven(
            [
                "dependency:copy",
                f"-Dartifact=io.apicurio:apicurio-registry-app:{version}:tar.gz:all",
                f"-DoutputDirectory={work / 'download'}",
            ],
            f"Apicurio Registry {version}",
            console,
        )
        (archive,) = (work / "download").glob("*.tar.gz")
        unpacked = work / "dist"
        with tarfile.open(archive) as tar, Progress(console=console, transient=True) as bar:
            members = tar.getmembers()
            task = bar.add_task("unpacking registry", total=len(members))
            for member in members:
                tar.extract(member, unpacked, filter="data")
                bar.advance(task)
        roots = [p for p in unpacked.iterdir() if (p / "quarkus-run.jar").exists()]
        root = roots[0] if roots else unpacked
        if not (root / "quarkus-run.jar").exists():
            raise DownloadFailed(f"{archive.name} has no quarkus-run.jar; is {version} a 3.3+?")
        _publish(root, target)
    return target


def zipkin_server(cache_dir: Path, version: str, console: Console) -> Path:
    """Zipkin's self-contained server jar (``java -jar``; in-memory storage unless told),
    the trace backend the tracing tests export to."""
    target = cache_dir / f"zipkin-server-{version}"
    jar = target / "zipkin-server.jar"
    if _cached(target):
        return jar
    console.print(f"Fetching Zipkin server {version} (about 135 MB, first use only)…")
    with tempfile.TemporaryDirectory(dir=_parent(cache_dir)) as tmp:
        staging = Path(tmp) / "zipkin"
        _run_maven(
            [
                "dependency:copy",
                f"-Dartifact=io.zipkin:zipkin-server:{version}:jar:exec",
                f"-DoutputDirectory={staging}",
            ],
            f"Zipkin server {version}",
            console,
        )
        (downloaded,) = staging.glob("*.jar")
        downloaded.rename(staging / jar.name)
        _publish(staging, target)
    return jar


def _parent(cache_dir: Path) -> Path:
    cache_dir.mkdir(parents=True, exist_ok=True)
    return cache_dir


def _publish(source: Path, target: Path) -> None:
    """Move a finished download into place and mark it complete, atomically enough."""
    if target.exists():
        shutil.rmtree(target)
    shutil.move(str(source), str(target))
    (target / _COMPLETE).touch()
