"""Running the alembic migrations in ``handoff/migrations/`` against the configured database."""

from __future__ import annotations

from importlib import resources
from pathlib import Path

from alembic import command
from alembic.config import Config

from handoff.core.errors import ConfigurationError
from handoff.core.settings import HandoffSettings


def migrations_dir() -> Path:
    """``handoff/migrations/``: package data, the only place the schema is defined."""
    folder = Path(str(resources.files("handoff") / "migrations"))
    if not (folder / "env.py").exists():
        raise ConfigurationError(f"migrations not found at {folder}; reinstall the handoff package")
    return folder


def alembic_config(settings: HandoffSettings) -> Config:
    config = Config()
    config.set_main_option("script_location", str(migrations_dir()))
    # '%' is interpolation syntax in alembic's ini-backed options
    config.set_main_option("sqlalchemy.url", settings.sqlalchemy_url.replace("%", "%%"))
    return config


def upgrade(settings: HandoffSettings, revision: str = "head") -> list[str]:
    """Apply the revisions; on Citus also place what they made (migrations/citus.py) and
    answer what was placed."""
    config = alembic_config(settings)
    command.upgrade(config, revision)
    placed: list[str] = config.attributes.get("citus", [])
    return placed
