"""Port choice and the persisted stack state."""

from __future__ import annotations

import os
import pwd
import socket
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest
from pydantic import ValidationError

from handoff.core.errors import StackError
from handoff.stack import postgres
from handoff.stack.kafka import Kafka, replication
from handoff.stack.layout import (
    Layout,
    StackSettings,
    ephemeral_range,
    pick_port,
    port_is_free,
)


def test_busy_preferred_port_is_replaced_by_a_free_one() -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        taken_port = busy.getsockname()[1]
        assert not port_is_free(taken_port)
        chosen = pick_port(taken_port, set())
    assert chosen != taken_port and 1024 <= chosen <= 65535


def test_a_port_already_chosen_in_this_run_is_not_reused() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        free = probe.getsockname()[1]
    assert pick_port(free, {free}) != free


def test_a_busy_preferred_port_is_replaced_outside_the_ephemeral_range() -> None:
    low, _ = ephemeral_range()
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        chosen = {pick_port(busy.getsockname()[1], set()) for _ in range(20)}
    assert all(20000 <= port < min(low, 32768) for port in chosen), chosen


def test_every_preferred_port_lies_outside_the_ephemeral_range() -> None:
    # A server port inside it can be held by a client's outgoing connection
    # (the bench peer's PostgreSQL once found 55452 taken that way).
    settings = StackSettings()
    low, high = ephemeral_range()
    preferred = {
        name: value for name, value in settings.model_dump().items() if name.endswith("_port")
    }
    # Further nodes, Citus workers, the bench peer: offsets of these up to 20.
    inside = {
        name: value for name, value in preferred.items()
        if any(low <= value + step <= high for step in range(21))
    }  # fmt: skip
    assert len(preferred) >= 8 and not inside


def test_first_choice_is_persisted_privately_and_reused(tmp_path: Path) -> None:
    layout = Layout(StackSettings(home=tmp_path / "home", cache_dir=tmp_path / "cache"))
    first = layout.choose_state()
    mode = stat.S_IMODE(layout.state_file.stat().st_mode)
    assert mode == 0o600  # holds database passwords
    again = Layout(StackSettings(home=tmp_path / "home", cache_dir=tmp_path / "cache"))
    assert again.choose_state() == first
    standing = [
        port for name, port in vars(first.ports).items() if name not in ("dynamodb", "more")
    ]
    assert len(set(standing)) == 5
    assert first.ports.dynamodb == 0  # chosen when DynamoDB first starts (on request only)
    # Kafka cluster ids are 16 random bytes in URL-safe base64 without padding
    assert len(first.kafka_cluster_id) == 22 and "=" not in first.kafka_cluster_id
    assert len({first.secrets.postgres, first.secrets.handoff, first.secrets.registry}) == 3


def test_a_home_records_its_broker_count_and_refuses_another(tmp_path: Path) -> None:
    def layout(brokers: int | None) -> Layout:
        return Layout(StackSettings(home=tmp_path / "h", cache_dir=tmp_path / "c", brokers=brokers))

    assert layout(3).choose_state().brokers == 3
    assert layout(None).choose_state().brokers == 3  # unset: what the home runs
    with pytest.raises(StackError, match="runs 3 Kafka broker"):
        layout(1).choose_state()


def test_cluster_nodes_get_ports_of_their_own_and_one_quorum(tmp_path: Path) -> None:
    from rich.console import Console

    layout = Layout(StackSettings(home=tmp_path / "h", cache_dir=tmp_path / "c", brokers=3))
    state = layout.choose_state()
    nodes = [Kafka(layout, state, Console(), node) for node in (1, 2, 3)]
    assert [n.name for n in nodes] == ["kafka", "kafka-2", "kafka-3"]
    ports = [port for n in nodes for port in n.ports()]
    assert len(set(ports)) == 6
    again = Layout(StackSettings(home=tmp_path / "h", cache_dir=tmp_path / "c")).choose_state()
    assert again.ports.more == state.ports.more  # recorded, so addresses stay put
    voters = {line for n in nodes for line in n._properties().splitlines() if "voters" in line}
    assert len(voters) == 1  # every node names the same three voters
    assert voters.pop().count("@127.0.0.1:") == 3
    assert "min.insync.replicas=2" in nodes[0]._properties()


def test_a_broker_takes_the_users_jvm_options_after_the_stacks(tmp_path: Path) -> None:
    from rich.console import Console

    settings = StackSettings(
        home=tmp_path / "h", cache_dir=tmp_path / "c",
        kafka_jvm_options="-XX:TieredStopAtLevel=1 '-Dnote=two words'",
    )  # fmt: skip
    layout = Layout(settings)
    broker = Kafka(layout, layout.choose_state(), Console())
    command = broker.command(Path("/jdk/bin/java"), Path("/lib"))
    assert command[0] == "/jdk/bin/java" and command[-2:] == ["kafka.Kafka", str(
        broker.dir / "server.properties")]  # fmt: skip
    # after the stack's own (the JVM takes the last of two), before the main class
    assert command.index("-XX:TieredStopAtLevel=1") > command.index("-XX:+UseG1GC")
    assert command.index("-Dnote=two words") < command.index("kafka.Kafka")
    plain = Kafka(Layout(StackSettings(home=tmp_path / "p", cache_dir=tmp_path / "c")),
                  layout.choose_state(), Console())  # fmt: skip
    assert not any("Tiered" in word for word in plain.command(Path("j"), Path("l")))


@pytest.mark.parametrize(
    ("value", "says"),
    [("-Xss1m 'unclosed", "cannot be split"), ("-Xss1m TieredStopAtLevel=1", "begin with '-'")],
)
def test_jvm_options_that_are_not_options_are_refused(value: str, says: str) -> None:
    with pytest.raises(ValidationError, match=says):
        StackSettings(kafka_jvm_options=value)


def test_replication_follows_the_broker_count() -> None:
    assert replication(1) == (1, 1)
    assert replication(2) == (2, 1)
    assert replication(3) == (3, 2)
    assert replication(5) == (3, 2)


def test_a_home_records_its_postgres_node_count_and_refuses_another(tmp_path: Path) -> None:
    def layout(nodes: int | None) -> Layout:
        return Layout(StackSettings(home=tmp_path / "h", cache_dir=tmp_path / "c", pg_nodes=nodes))

    assert layout(2).choose_state().pg_nodes == 2
    assert layout(None).choose_state().pg_nodes == 2
    with pytest.raises(StackError, match="runs 2 PostgreSQL node"):
        layout(1).choose_state()


def test_a_postgres_cluster_is_two_patroni_nodes_behind_one_url(tmp_path: Path) -> None:
    from rich.console import Console

    from handoff.stack.local import LocalStack
    from handoff.stack.patroni import PatroniNode

    settings = StackSettings(home=tmp_path / "h", cache_dir=tmp_path / "c", pg_nodes=2)
    stack = LocalStack(settings, Console())
    assert [p.name for p in stack.database_parts] == ["zookeeper", "postgres", "postgres-2"]
    assert stack.standing[:3] == ("zookeeper", "postgres", "postgres-2")
    first, second = stack.pg_nodes
    assert isinstance(first, PatroniNode) and isinstance(second, PatroniNode)
    assert len({first.port, second.port, first.rest_port, second.rest_port}) == 4
    # Every client is given both nodes and asks for the one that takes writes.
    url = stack.env()["HANDOFF_DATABASE_URL"]
    assert f"127.0.0.1:{first.port},127.0.0.1:{second.port}/handoff" in url
    assert url.endswith("?target_session_attrs=read-write")
    assert "targetServerType=primary" in first.registry_jdbc_url()
    assert f"{second.port}/apicurio" in first.registry_jdbc_url()
    # Strict synchronous mode: an acknowledged commit is on a standby too.
    config = first._patroni_config()
    assert config["bootstrap"]["dcs"]["synchronous_mode_strict"] is True
    assert config["name"] == "postgres" and second._patroni_config()["name"] == "postgres-2"
    assert config["zookeeper"]["hosts"] == [stack.zookeeper.address()]  # type: ignore[union-attr]


def test_a_lone_postgres_keeps_its_one_host_url(tmp_path: Path) -> None:
    from rich.console import Console

    from handoff.stack.local import LocalStack

    stack = LocalStack(StackSettings(home=tmp_path / "h", cache_dir=tmp_path / "c"), Console())
    assert stack.zookeeper is None and stack.cluster is None
    url = stack.env()["HANDOFF_DATABASE_URL"]
    assert "," not in url and "target_session_attrs" not in url


def test_a_cluster_member_says_its_role_timeline_and_lag() -> None:
    from handoff.stack.patroni import Member

    leader = Member.of({"name": "postgres", "role": "leader", "state": "running", "timeline": 3})
    assert leader.describe() == "leader, timeline 3"
    standby = Member.of(
        {"name": "postgres-2", "role": "sync_standby", "state": "streaming", "timeline": 3,
         "lag": 4096}
    )  # fmt: skip
    assert standby.describe() == "sync standby, timeline 3, streaming, lag 4096 B"
    lost = Member.of(
        {"name": "postgres-2", "role": "replica", "state": "stopped", "lag": "unknown"}
    )
    assert lost.describe() == "replica, stopped, lag unknown"


def test_a_cluster_database_part_asked_for_alone_brings_the_whole_database(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from rich.console import Console

    from handoff.stack.local import LocalStack

    settings = StackSettings(home=tmp_path / "h", cache_dir=tmp_path / "c", pg_nodes=2)
    stack = LocalStack(settings, Console())
    prepared: list[str] = []

    def stop_after_prepare(part: object) -> None:
        prepared.append(part.name)  # type: ignore[attr-defined]
        if len(prepared) == len(stack.database_parts) + 1:
            raise RuntimeError("enough")

    for part in stack.parts:
        monkeypatch.setattr(part, "prepare", lambda p=part: stop_after_prepare(p))
    with pytest.raises(RuntimeError, match="enough"):
        stack.up(["postgres-2", "registry"])
    assert prepared == ["zookeeper", "postgres", "postgres-2", "registry"]


def test_giving_a_live_data_folder_passes_files_the_server_removed_fake_walk(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A worker re-prepared while it runs (a chaos run adding one) removes temp files
    while the walk is under way: a file listed, then gone, is not an error."""
    (tmp_path / "base").mkdir()
    kept, gone = tmp_path / "base" / "kept", tmp_path / "base" / "job_cache_1"
    kept.write_text("x")
    gone.write_text("x")
    listed = list(os.walk(tmp_path))

    def walk_then_remove(path: Path) -> Iterator[tuple[str, list[str], list[str]]]:
        gone.unlink()  # the server removes it after the listing above
        yield from listed

    monkeypatch.setattr(postgres.os, "walk", walk_then_remove)
    user = pwd.getpwuid(os.getuid()).pw_name
    postgres.give_to(user, tmp_path)
    assert kept.stat().st_uid == os.getuid() and not gone.exists()
