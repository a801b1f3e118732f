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


def _on(url: str) -> HandoffSettings:
    return HandoffSettings(database_url=url, kafka_bootstrap="k:9092")


def test_a_multi_host_url_reaches_alembic_as_one_host_list() -> None:
    from sqlalchemy.engine import make_url

    url = "postgresql://u:p%40w@h1:5432,h2:5433/handoff?target_session_attrs=read-write"
    parsed = make_url(_on(url).sqlalchemy_url)
    assert parsed.drivername == "postgresql+psycopg"
    assert (parsed.username, parsed.password, parsed.database) == ("u", "p@w", "handoff")
    assert parsed.query["host"] == ("h1:5432", "h2:5433")
    assert parsed.query["target_session_attrs"] == "read-write"
    one = make_url(_on("postgresql://u:p@h1:6000/db?sslmode=disable").sqlalchemy_url)
    assert (one.host, one.port, one.query["sslmode"]) == ("h1", 6000, "disable")


def test_a_url_libpq_cannot_read_is_refused_with_what_is_wrong() -> None:
    with pytest.raises(ValidationError, match="3 hosts but 2 ports"):
        _on("postgresql://u:p@h1,h2,h3/db?port=1,2")
    with pytest.raises(ValidationError, match="not a URL libpq can read"):
        _on("postgresql://u:p@h1/db?nonsense=1")
    with pytest.raises(ValidationError, match="port 'notaport' is not a number"):
        _on("postgresql://u:p@h1:notaport/db")
