"""Alembic environment: the URL comes from Handoff's settings (see handoff/stack/migrate.py);
it imports only ``handoff.core``, so migrations run from an installed wheel.

The schema is written as explicit DDL in each revision (no autogenerate from
models): partial indexes, row-level security and server-side functions are
the point of this schema, and they read best as the SQL they are.
"""

from __future__ import annotations

from alembic import context
from sqlalchemy import create_engine, pool

from handoff.core.settings import load_settings
from handoff.migrations.citus import distribute

config = context.config


def _url() -> str:
    return config.get_main_option("sqlalchemy.url") or load_settings().sqlalchemy_url


def run_offline() -> None:
    context.configure(url=_url(), literal_binds=True, transaction_per_migration=True)
    with context.begin_transaction():
        context.run_migrations()


def run_online() -> None:
    engine = create_engine(_url(), poolclass=pool.NullPool)
    with engine.connect() as connection:
        context.configure(connection=connection, transaction_per_migration=True)
        with context.begin_transaction():
            context.run_migrations()
        # On Citus, tables and functions the revisions made are placed now
        # (handoff/migrations/citus.py); elsewhere this does nothing.
        if connection.in_transaction():  # alembic's own reads (the version table)
            connection.commit()
        with connection.begin():
            config.attributes["citus"] = distribute(connection)
    engine.dispose()


if context.is_offline_mode():
    run_offline()
else:
    run_online()
