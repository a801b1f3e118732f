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
    ] = "postgresql://handoff@127.0.0.1:15432/handoff"
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
        """``database_url`` as SQLAlchemy's psycopg 3 dialect takes it (for alembic).

        A multi-host URL (``postgresql://u:p@h1:5432,h2:5432/db?target_session_attrs=
        read-write``, what a failover setup hands out) is no URL SQLAlchemy can parse:
        libpq's own parser splits it, and the hosts go in the query as ``host=h:p``,
        which the dialect passes on to libpq as one list.
        """
        from psycopg.conninfo import conninfo_to_dict
        from sqlalchemy.engine import URL

        params = {k: str(v) for k, v in conninfo_to_dict(self.database_url).items()}
        user, password = params.pop("user", None), params.pop("password", None)
        database = params.pop("dbname", None)
        hosts = params.pop("host", "").split(",")
        ports = params.pop("port", "").split(",")
        if len(hosts) == 1:
            url = URL.create("postgresql+psycopg", user, password, hosts[0] or None,
                             int(ports[0]) if ports[0] else None, database, params)  # fmt: skip
        else:
            ports = ports * len(hosts) if len(ports) == 1 else ports  # one port for all
            listed = tuple(f"{h}:{p}" if p else h for h, p in zip(hosts, ports, strict=True))
            url = URL.create("postgresql+psycopg", user, password, None, None, database,
                             {**params, "host": listed})  # fmt: skip
        return url.render_as_string(hide_password=False)

    @field_validator("database_url")
    @classmethod
    def _postgres_url(cls, value: str) -> str:
        if not value.startswith(("postgresql://", "postgres://")):
            raise ValueError("must be a postgresql:// URL, e.g. postgresql://user:pw@host:5432/db")
        from psycopg import ProgrammingError
        from psycopg.conninfo import conninfo_to_dict

        try:
            params = conninfo_to_dict(value)
        except ProgrammingError as exc:  # libpq's own words: which part it could not read
            raise ValueError(f"not a URL libpq can read: {exc}") from None
        hosts = str(params.get("host") or "").split(",")
        ports = str(params.get("port") or "").split(",")
        if len(ports) not in (1, len(hosts)):
            raise ValueError(f"{len(hosts)} hosts but {len(ports)} ports: give one port each")
        if bad := [port for port in ports if port and not port.isdigit()]:
            raise ValueError(f"port {bad[0]!r} is not a number")
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
