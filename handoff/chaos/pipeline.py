"""The pipeline a chaos run drives: the sample invoice services, two of each process.

intake (the load generator, through the API) -> routing -> review (approves
small amounts at once) -> finalization (intends the payment) -> executors
(pay at the sandbox provider through the effect ledger) -> paid. Two relays,
two consumer processes per stage, two executor processes and one API, all
supervised by the engine of ``handoff run``: a killed process is started again.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from pathlib import Path

import psycopg

from handoff.core.identity import Credential
from handoff.core.kafka import ensure_topics
from handoff.core.services import add_service
from handoff.core.settings import HandoffSettings
from handoff.deploy.deployment import Deployment, ProcessSpec

APP = "handoff.samples.invoices"
# (process name, consumer app) of each stage; every one runs twice.
STAGES = (("routing", "routing"), ("review", "review"), ("finalization", "finalization"))
SERVICES = ("intake", "routing", "review", "senior-review", "finalization")
# Every document's versions when it is paid: created, routed, approved, paying, paid.
PAID_VERSION = 5


@dataclass(frozen=True)
class Pipeline:
    tenant: str
    topic: str
    credentials: dict[str, Credential]
    api_port: int
    sandbox_port: int

    @property
    def api_url(self) -> str:
        return f"http://127.0.0.1:{self.api_port}"

    @property
    def sandbox_url(self) -> str:
        return f"http://127.0.0.1:{self.sandbox_port}"

    @classmethod
    def register(
        cls, settings: HandoffSettings, *, api_port: int, sandbox_port: int, partitions: int = 6
    ) -> Pipeline:
        """A tenant and topic of the run's own, so runs never see each other's work."""
        run = uuid.uuid4().hex[:8]
        tenant, topic = f"chaos-{run}", f"handoff.chaos.{run}"
        with psycopg.connect(settings.database_url, autocommit=True) as conn:
            credentials = {
                name: add_service(conn, name, tenant=tenant, can_create=name == "intake")
                for name in SERVICES
            }
        ensure_topics(settings.kafka_bootstrap, [topic], partitions=partitions)
        return cls(tenant, topic, credentials, api_port, sandbox_port)

    def deployment(self, settings: HandoffSettings, home: Path, folder: Path) -> Deployment:
        env = {
            "HANDOFF_DATABASE_URL": settings.database_url,
            "HANDOFF_KAFKA_BOOTSTRAP": settings.kafka_bootstrap,
            "HANDOFF_SCHEMA_REGISTRY_URL": settings.schema_registry_url,
            "HANDOFF_HOME": str(home),
            "HANDOFF_SANDBOX_URL": self.sandbox_url,
            "HANDOFF_RELAY_DEFAULT_TOPIC": self.topic,
            # A killed process's partitions and claims move on in seconds, not a minute.
            "HANDOFF_CONSUMER_SESSION_TIMEOUT_S": "6",
            "HANDOFF_EFFECTS_LEASE_S": "8",
            "HANDOFF_EFFECTS_TIMEOUT_S": "3",
            "HANDOFF_EFFECTS_RETRY_MAX_S": "3",
            "HANDOFF_EFFECTS_MAX_ATTEMPTS": "20",
            "HANDOFF_EFFECTS_MAX_LOOKUPS": "20",
        }
        processes = [
            ProcessSpec(
                name="sandbox",
                handoff=[
                    "sandbox-provider",
                    "--port",
                    str(self.sandbox_port),
                    "--data",
                    str(folder / "sandbox"),
                    "--latency-ms",
                    "10",
                ],
                restart="always",
            ),
            ProcessSpec(name="relay", handoff=["relay"], count=2, restart="always"),
        ]
        for name, app in STAGES:
            processes.append(
                ProcessSpec(
                    name=name,
                    handoff=["consume", f"{APP}:{app}", "--topic", self.topic, "--executors", "0"],
                    count=2,
                    restart="always",
                    env={"HANDOFF_CONSUMER_CREDENTIAL": self.credentials[name].token},
                )
            )
        processes += [
            ProcessSpec(
                name="executor",
                handoff=["effects", "run", f"{APP}:finalization", "--executors", "2"],
                count=2,
                restart="always",
                env={"HANDOFF_CONSUMER_CREDENTIAL": self.credentials["finalization"].token},
            ),
            ProcessSpec(
                name="api",
                handoff=["serve", "--port", str(self.api_port)],
                restart="always",
            ),
        ]
        return Deployment(env=env, process=processes)
