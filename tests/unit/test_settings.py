"""Settings: defaults, env-file layering, and validation messages."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from handoff.core.settings import HandoffSettings, load_settings
from handoff.stack.layout import StackSettings


def test_stack_env_file_is_read_and_environment_wins(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for key in ("DATABASE_URL", "KAFKA_BOOTSTRAP", "SCHEMA_REGISTRY_URL"):
        monkeypatch.delenv(f"HANDOFF_{key}", raising=False)
    (tmp_path / "stack.env").write_text(
        "HANDOFF_DATABASE_URL=postgresql://u:p@127.0.0.1:6000/db\n"
        "HANDOFF_KAFKA_BOOTSTRAP=127.0.0.1:7000\n"
    )
    monkeypatch.setenv("HANDOFF_KAFKA_BOOTSTRAP", "127.0.0.1:7777")
    settings = load_settings(tmp_path)
    assert settings.database_url == "postgresql://u:p@127.0.0.1:6000/db"
    assert settings.kafka_bootstrap == "127.0.0.1:7777"
    assert settings.schema_registry_url.endswith("/apis/ccompat/v7")


def test_missing_env_file_gives_defaults(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("HANDOFF_DATABASE_URL", raising=False)
    assert load_settings(tmp_path).database_url.startswith("postgresql://")


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("database_url", "mysql://x", "postgresql://"),
        ("kafka_bootstrap", "localhost", "host:port"),
        ("kafka_bootstrap", "a:1,b", "host:port"),
        ("schema_registry_url", "ftp://x", "http"),
    ],
)
def test_invalid_values_say_what_to_fix(field: str, value: str, message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        HandoffSettings(**{field: value})


def test_registry_url_loses_trailing_slash() -> None:
    assert (
        HandoffSettings(schema_registry_url="http://h:1/x/").schema_registry_url == "http://h:1/x"
    )


def test_stack_ports_are_validated() -> None:
    with pytest.raises(ValidationError, match="between 1024 and 65535"):
        StackSettings(kafka_port=80)


def test_stack_paths_become_absolute(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    settings = StackSettings(home=Path("rel"), cache_dir=Path("~/c"))
    assert settings.home == tmp_path / "rel"
    assert settings.cache_dir == Path.home() / "c"
