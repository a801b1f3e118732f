"""Running the alembic migrations in ``alembic/`` against the configured database."""

from __future__ import annotations

from pathlib import Path

from alembic.config import Config

from alembic import command
from handoff.core.errors import ConfigurationError
from handoff.core.settings import HandoffSettings


def migrations_dir() -> Path:
    """``alembic/`` beside the package: the schema is defined only there."""
    folder = Path(__file__).resolve().parents[2] / "alembic"
    if not (folder / "env.py").exists():
        raise ConfigurationError(
            f"migrations not found at {folder}; run from a source checkout "
            "(pip install -e .) so that alembic/ is beside the handoff package"
        )
    return folder


def sqlalchemy_url(database_url: str) -> str:
    """The libpq URL with SQLAlchemy's psycopg 3 driver named."""
    scheme, rest = database_url.split("://", 1)
    return f"postgresql+psycopg://{rest}" if scheme in ("postgresql", "postgres") else database_url


def alembic_config(settings: HandoffSettings) -> Config:
    config = Config()
    config.set_main_option("script_location", str(migrations_dir()))
    # '%' is interpolation syntax in alembic's ini-backed options
    config.set_main_option(
        "sqlalchemy.url", sqlalchemy_url(settings.database_url).replace("%", "%%")
    )
    return config


def upgrade(settings: HandoffSettings, revision: str = "head") -> None:
    command.upgrade(alembic_config(settings), revision)
