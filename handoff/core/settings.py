"""Typed settings for every Handoff process, read from ``HANDOFF_*`` variables.

Precedence, highest first: real environment variables, then the env file
that ``handoff stack up`` writes (``<home>/stack.env``), then the defaults
below. That file is how the CLI, the tests and the demo find the ports the
local stack chose without anyone exporting anything.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

ENV_PREFIX = "HANDOFF_"
STACK_ENV_FILE = "stack.env"


def default_home() -> Path:
    """Folder for the local stack's data, logs and chosen settings.

    ``HANDOFF_HOME`` wins; otherwise ``.handoff`` in the current directory,
    which is the project root for ``make`` targets and tests.
    """
    return Path(os.environ.get(f"{ENV_PREFIX}HOME", ".handoff")).absolute()


class HandoffSettings(BaseSettings):
    """Where the running parts are. Every process reads these."""

    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, extra="ignore")

    database_url: Annotated[
        str,
        Field(description="libpq URL of the Handoff database (admin role for migrations)."),
    ] = "postgresql://handoff@127.0.0.1:55432/handoff"
    kafka_bootstrap: Annotated[
        str, Field(description="Kafka bootstrap servers, host:port[,host:port...].")
    ] = "127.0.0.1:19092"
    schema_registry_url: Annotated[
        str,
        Field(description="Confluent-compatible schema registry API base URL."),
    ] = "http://127.0.0.1:18080/apis/ccompat/v7"

    dynamodb_url: Annotated[
        str | None,
        Field(
            description="DynamoDB endpoint of the AWS twin (handoff stack up --with dynamodb "
            "sets it; unset: the twin's commands say so)."
        ),
    ] = None

    @property
    def sqlalchemy_url(self) -> str:
        """``database_url`` with SQLAlchemy's psycopg 3 driver named (for alembic)."""
        return "postgresql+psycopg://" + self.database_url.split("://", 1)[1]

    @field_validator("database_url")
    @classmethod
    def _postgres_url(cls, value: str) -> str:
        if not value.startswith(("postgresql://", "postgres://")):
            raise ValueError("must be a postgresql:// URL, e.g. postgresql://user:pw@host:5432/db")
        return value

    @field_validator("kafka_bootstrap")
    @classmethod
    def _bootstrap(cls, value: str) -> str:
        for server in value.split(","):
            host, _, port = server.strip().rpartition(":")
            if not host or not port.isdigit():
                raise ValueError(f"{server!r} is not host:port, e.g. 127.0.0.1:9092")
        return value

    @field_validator("schema_registry_url")
    @classmethod
    def _http_url(cls, value: str) -> str:
        if not value.startswith(("http://", "https://")):
            raise ValueError("must be an http(s):// URL")
        return value.rstrip("/")


def load_settings(home: Path | None = None) -> HandoffSettings:
    """Settings with the local stack's env file, if one was written, underneath."""
    env_file = (home or default_home()) / STACK_ENV_FILE
    return HandoffSettings(_env_file=env_file if env_file.exists() else None)
