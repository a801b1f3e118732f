"""The AsyncAPI document: served, valid for the AsyncAPI parser, true to the registry."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import httpx
import yaml
from confluent_kafka.schema_registry import SchemaRegistryClient

from handoff.core.settings import HandoffSettings
from handoff.relay.asyncapi import MESSAGE
from handoff.relay.kafka_io import register_schemas
from handoff.relay.settings import RelaySettings

VALIDATE = Path(__file__).parents[3] / "scripts" / "asyncapi" / "validate.mjs"


def validate(path: Path) -> dict[str, object]:
    """The AsyncAPI parser's verdict on ``path`` (scripts/asyncapi, installed by make)."""
    done = subprocess.run(
        ["node", str(VALIDATE), str(path)], check=False, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stdout + done.stderr
    summary: dict[str, object] = json.loads(done.stdout.splitlines()[-1])
    return summary


def test_the_served_document_is_valid_and_holds_the_schema_the_registry_serves(
    api_url: str, migrated: HandoffSettings, tmp_path: Path
) -> None:
    answer = httpx.get(f"{api_url}/asyncapi.yaml", timeout=10)
    assert answer.status_code == 200
    assert answer.headers["content-type"].startswith("application/yaml")
    served = tmp_path / "asyncapi.yaml"
    served.write_text(answer.text)

    summary = validate(served)
    assert summary["errors"] == [] and summary["warnings"] == []
    topics = RelaySettings().topics()
    assert summary["channels"] == topics
    document = yaml.safe_load(answer.text)
    assert document["servers"]["kafka"]["host"] == migrated.kafka_bootstrap.split(",")[0]

    # What a relay registers at its start (under <topic>-value, oldest version first):
    # the newest is the document's payload schema, field for field.
    register_schemas(migrated.schema_registry_url, topics)
    described = document["components"]["messages"][MESSAGE]["payload"]["schema"]
    with SchemaRegistryClient({"url": migrated.schema_registry_url, "timeout": 10}) as registry:
        for topic in topics:
            latest = registry.get_latest_version(f"{topic}-value")
            assert json.loads(latest.schema.schema_str) == described, topic


def test_the_committed_document_is_valid() -> None:
    summary = validate(Path(__file__).parents[3] / "docs" / "asyncapi.yaml")
    assert summary["errors"] == []
    messages = summary["messages"]
    assert isinstance(messages, list) and messages[0]["id"] == MESSAGE
    assert "ce_id" in messages[0]["headers"] and "eventId" in messages[0]["payloadFields"]


def test_a_broken_document_is_refused_by_the_validator(tmp_path: Path) -> None:
    """The check can fail: an operation with an action AsyncAPI does not know."""
    text = (Path(__file__).parents[3] / "docs" / "asyncapi.yaml").read_text()
    broken = tmp_path / "broken.yaml"
    broken.write_text(text.replace("action: send", "action: publish", 1))
    done = subprocess.run(
        ["node", str(VALIDATE), str(broken)],
        check=False,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 1
    assert any("action" in e for e in json.loads(done.stdout.splitlines()[-1])["errors"])
