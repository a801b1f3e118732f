"""Port choice and the persisted stack state."""

from __future__ import annotations

import socket
import stat
from pathlib import Path

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
    standing = [port for name, port in vars(first.ports).items() if name != "dynamodb"]
    assert len(set(standing)) == 5
    assert first.ports.dynamodb == 0  # chosen when DynamoDB first starts (on request only)
    # Kafka cluster ids are 16 random bytes in URL-safe base64 without padding
    assert len(first.kafka_cluster_id) == 22 and "=" not in first.kafka_cluster_id
    assert len({first.secrets.postgres, first.secrets.handoff, first.secrets.registry}) == 3
