"""The container test stack's configuration (no Docker engine needed), and that
asking for it without an engine fails loudly instead of skipping."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import yaml

from handoff.core.settings import HandoffSettings
from tests.stack_containers import IMAGES, INIT_SQL, docker_problem, settings_for, specs

ROOT = Path(__file__).resolve().parents[2]


def compose() -> dict:  # type: ignore[type-arg]
    return yaml.safe_load((ROOT / "docker-compose.yml").read_text())


def test_images_are_the_compose_files() -> None:
    services = compose()["services"]
    assert {name: services[name]["image"] for name in IMAGES} == IMAGES
    made = specs(postgres_port=1, kafka_port=2, registry_port=3, password="p")
    assert [s.image for s in made] == [IMAGES["postgres"], IMAGES["kafka"], IMAGES["registry"]]


def test_ports_environment_and_settings_agree() -> None:
    postgres, kafka, registry = specs(
        postgres_port=25432, kafka_port=29092, registry_port=28080, password="pw"
    )
    assert postgres.ports == {5432: 25432} and postgres.env["POSTGRES_PASSWORD"] == "pw"
    assert postgres.files["/docker-entrypoint-initdb.d/10-handoff.sql"] == INIT_SQL
    assert "CREATE ROLE handoff LOGIN CREATEROLE PASSWORD 'handoff'" in INIT_SQL.read_text()
    # the broker advertises the port the host reaches it on
    assert kafka.ports == {19092: 29092}
    assert "HOST://127.0.0.1:29092" in kafka.env["KAFKA_ADVERTISED_LISTENERS"]
    assert kafka.env["KAFKA_CONTROLLER_QUORUM_VOTERS"] == f"1@{kafka.alias}:9093"
    # the registry stores its schemas in the postgres container, by its alias
    assert (
        registry.env["APICURIO_DATASOURCE_URL"]
        == f"jdbc:postgresql://{postgres.alias}:5432/apicurio"
    )
    settings = settings_for(postgres_port=25432, kafka_port=29092, registry_port=28080)
    assert isinstance(settings, HandoffSettings)
    assert settings.database_url == "postgresql://handoff:handoff@127.0.0.1:25432/handoff"
    assert settings.kafka_bootstrap == "127.0.0.1:29092"
    assert settings.schema_registry_url == "http://127.0.0.1:28080/apis/ccompat/v7"


def test_without_a_docker_engine_the_container_stack_fails_and_never_skips() -> None:
    assert docker_problem() is not None, "this machine has a Docker engine: run the real thing"
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
         "tests/integration/test_stack_postgres.py"],
        cwd=ROOT, env={**os.environ, "HANDOFF_TEST_STACK": "containers"},
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    out = done.stdout + done.stderr
    assert done.returncode == 1, out
    assert "needs a running Docker engine" in out and "unset HANDOFF_TEST_STACK" in out
    assert "skipped" not in out and " passed" not in out
