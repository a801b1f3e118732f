"""Port choice and the persisted stack state."""

from __future__ import annotations

import socket
import stat
from pathlib import Path

import pytest

from handoff.core.errors import StackError
from handoff.stack.kafka import Kafka, replication
from handoff.stack.layout import Layout, StackSettings, pick_port, port_is_free


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


def test_replication_follows_the_broker_count() -> None:
    assert replication(1) == (1, 1)
    assert replication(2) == (2, 1)
    assert replication(3) == (3, 2)
    assert replication(5) == (3, 2)
