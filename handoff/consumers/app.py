"""A consumer: a named service, its credential, and its handlers registered as data.

    app = Consumer("review", credential)

    @app.handler("routed")
    def review(event: Event, tx: HandoffTx) -> None:
        tx.execute("INSERT INTO review.inbox (document_id) VALUES (%s)", (event.document_id,))
        tx.emit(event_id=event.next_event_id("approve"), event_type="approved",
                document_id=event.document_id, run_id=event.run_id, next_owner="finalization",
                status="approved", expected_version=event.version, causation_id=event.event_id)

``handoff consume module:app`` runs it (handoff/consumers/runtime.py). The
runtime wraps every handler in the same guard, ordering, retries and
quarantine; none of that is written into a handler.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from handoff.consumers.event import Event
from handoff.core.errors import ConfigurationError, HandlerMissing
from handoff.core.identity import Credential
from handoff.core.names import id_problem, service_name_problem
from handoff.core.tx import HandoffTx

HandlerFn = Callable[[Event, HandoffTx], Any]

# Who the events are for, by default: the consumer itself. A service reacts
# to the event that made it the owner [EventBridge rule on detail.owner].
SELF = "<self>"


@dataclass(frozen=True)
class Handler:
    event_type: str
    fn: HandlerFn
    name: str
    version: str


class Consumer:
    """``name`` must be the service the credential logs in as (checked at start)."""

    def __init__(
        self,
        name: str,
        credential: str | Credential | None = None,
        *,
        owner: str | None = SELF,
        credential_env: str = "HANDOFF_CONSUMER_CREDENTIAL",
    ) -> None:
        if (problem := service_name_problem(name)) is not None:
            raise ConfigurationError(f"consumer name: {problem}")
        self.name = name
        self._credential = credential
        self.credential_env = credential_env
        # owner=None: every owner's events (a projection); else one owner's.
        self.owner = name if owner == SELF else owner
        self.handlers: dict[str, Handler] = {}

    @property
    def credential(self) -> Credential:
        found = self._credential or os.environ.get(self.credential_env)
        if not found:
            raise ConfigurationError(
                f"consumer {self.name} has no credential: pass it to Consumer(...) or set "
                f"{self.credential_env} to what `handoff service add {self.name}` printed"
            )
        return found if isinstance(found, Credential) else Credential.parse(found)

    def add_handler(
        self, event_type: str, fn: HandlerFn, *, name: str | None = None, version: str = "1"
    ) -> Handler:
        """Register ``fn`` for events of ``event_type``; one handler per type."""
        if (problem := id_problem(event_type)) is not None:
            raise ConfigurationError(f"event type: {problem}")
        if event_type in self.handlers:
            raise HandlerMissing(
                f"{self.name} already has a handler for {event_type} "
                f"({self.handlers[event_type].name})"
            )
        label = name or str(getattr(fn, "__name__", "handler"))
        handler = Handler(event_type, fn, label, version)
        self.handlers[event_type] = handler
        return handler

    def handler(
        self, event_type: str, *, name: str | None = None, version: str = "1"
    ) -> Callable[[HandlerFn], HandlerFn]:
        """Decorator form of ``add_handler``."""

        def register(fn: HandlerFn) -> HandlerFn:
            self.add_handler(event_type, fn, name=name, version=version)
            return fn

        return register

    @property
    def event_types(self) -> list[str]:
        return sorted(self.handlers)

    def wants(self, event_type: str, owner: str | None, tenant: str, my_tenant: str) -> bool:
        """The header filter [EventBridge Pipe filter]: decided before any decoding."""
        return (
            event_type in self.handlers
            and tenant == my_tenant
            and (self.owner is None or owner == self.owner)
        )
