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

An effect outside the database is declared with its provider, recorded by
the handler as an intent, and performed after the commit by an executor
(handoff/consumers/executor.py)::

    pay = app.effect("pay", provider=lambda: SandboxPayments(url))

    @app.handler("approved")
    def finalize(event, tx):
        pay.intend(tx, event, {"amount": ..., "currency": "EUR", "reference": ...},
                   business_key=f"{event.document_id}:{event.run_id}")

    @pay.on_outcome
    def paid(outcome, tx):   # in the transaction that records the provider's answer
        tx.emit(...)
"""

from __future__ import annotations

import os
import re
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from handoff.consumers.event import Event
from handoff.core.effects import Intent
from handoff.core.errors import ConfigurationError, DuplicateHandler
from handoff.core.identity import Credential
from handoff.core.names import id_problem, service_name_problem
from handoff.core.tx import HandoffTx

if TYPE_CHECKING:
    from handoff.consumers.providers import Provider

HandlerFn = Callable[[Event, HandoffTx], Any]

# Who the events are for, by default: the consumer itself. A service reacts
# to the event that made it the owner [EventBridge rule on detail.owner].
SELF = "<self>"
EFFECT_NAME = re.compile(r"^[a-z][a-z0-9_-]{0,39}$")


@dataclass(frozen=True)
class Handler:
    event_type: str
    fn: HandlerFn
    name: str
    version: str
    # A content filter [EventBridge Pipe filter on the record]: field -> wanted
    # value, on the event's fields or its data. A filtered-out event still
    # passes the guard (it is this consumer's position), with no handler call.
    where: tuple[tuple[str, Any], ...] = ()

    def matches(self, event: Event) -> bool:
        for field, wanted in self.where:
            found = getattr(event, field) if field in EVENT_FIELDS else event.data.get(field)
            if found != wanted:
                return False
        return True


EVENT_FIELDS = frozenset(Event.__dataclass_fields__) - {"data", "position", "fingerprint"}


@dataclass(frozen=True)
class Outcome:
    """What the provider answered for an intent, handed to the effect's ``on_outcome``."""

    intent_id: int
    effect: str
    idempotency_key: str
    event_id: str
    document_id: str
    run_id: int
    request: dict[str, Any]
    succeeded: bool
    reference: str | None
    body: dict[str, Any]
    reconciled: bool  # found by a status lookup, not answered to a submission


OutcomeFn = Callable[[Outcome, HandoffTx], Any]


class Effect:
    """An external effect of a consumer: its name, its provider, what follows its outcome."""

    def __init__(
        self,
        name: str,
        provider: Provider | Callable[[], Provider],
        on_outcome: OutcomeFn | None = None,
    ) -> None:
        self.name = name
        self._provider = provider
        self._made: Provider | None = None
        self._making = threading.Lock()
        self.outcome_fn = on_outcome

    @property
    def provider(self) -> Provider:
        """Made on first use (a factory may read settings that exist only at run time)."""
        if self._made is None:
            # Executor threads start together: one makes it, the others wait for it
            # (each making its own left clients behind, never closed).
            with self._making:
                if self._made is None:
                    given = self._provider
                    self._made = given() if callable(given) else given
        return self._made

    def on_outcome(self, fn: OutcomeFn) -> OutcomeFn:
        """Decorator: ``fn(outcome, tx)`` runs in the transaction that records the answer."""
        self.outcome_fn = fn
        return fn

    def intend(
        self,
        tx: HandoffTx,
        event: Event,
        request: dict[str, Any],
        *,
        business_key: str | None = None,
    ) -> Intent:
        """Record this effect for ``event`` in the handler's transaction (the guard's)."""
        return tx.intend(
            event_id=event.event_id,
            effect=self.name,
            document_id=event.document_id,
            run_id=event.run_id,
            request=request,
            business_key=business_key,
        )

    def close(self) -> None:
        if self._made is not None:
            self._made.close()
            self._made = None


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
        self.effects: dict[str, Effect] = {}
        # Events per transaction when the runtime's setting does not say
        # (a workflow starter wants 1 [Lambda batch size 1]).
        self.batch_size: int | None = None
        # Injection points, set in code by the app (instrumentation, or a test that
        # proves what a crash there does); no setting can add one.
        self.after_commit_hooks: list[Callable[[int], None]] = []
        self.after_submit_hooks: list[Callable[[int], None]] = []

    def after_commit(self, fn: Callable[[int], None]) -> Callable[[int], None]:
        """Call ``fn(events)`` after a unit's database commit, before its Kafka offsets are
        stored (a crash there is a redelivery the guard absorbs). ``events``: the events
        given to the unit (its messages less those filtered out); units are reported in
        the order they were made, each once it is through."""
        self.after_commit_hooks.append(fn)
        return fn

    def after_submit(self, fn: Callable[[int], None]) -> Callable[[int], None]:
        """Call ``fn(intent_id)`` after a provider answered an effect's request, before the
        answer is recorded (a crash there leaves a submitted intent to reconcile)."""
        self.after_submit_hooks.append(fn)
        return fn

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
        self,
        event_type: str,
        fn: HandlerFn,
        *,
        name: str | None = None,
        version: str = "1",
        where: dict[str, Any] | None = None,
    ) -> Handler:
        """Register ``fn`` for events of ``event_type``; one handler per type.

        ``where``: only events whose fields (``status``, ``owner``, …) or data
        keys have these values reach ``fn``.
        """
        if (problem := id_problem(event_type)) is not None:
            raise ConfigurationError(f"event type: {problem}")
        if event_type in self.handlers:
            raise DuplicateHandler(
                f"{self.name} already has a handler for {event_type} "
                f"({self.handlers[event_type].name})"
            )
        label = name or str(getattr(fn, "__name__", "handler"))
        handler = Handler(event_type, fn, label, version, tuple((where or {}).items()))
        self.handlers[event_type] = handler
        return handler

    def handler(
        self,
        event_type: str,
        *,
        name: str | None = None,
        version: str = "1",
        where: dict[str, Any] | None = None,
    ) -> Callable[[HandlerFn], HandlerFn]:
        """Decorator form of ``add_handler``."""

        def register(fn: HandlerFn) -> HandlerFn:
            self.add_handler(event_type, fn, name=name, version=version, where=where)
            return fn

        return register

    def effect(
        self,
        name: str,
        *,
        provider: Provider | Callable[[], Provider],
        on_outcome: OutcomeFn | None = None,
    ) -> Effect:
        """Declare an external effect performed by this consumer's executors."""
        if not EFFECT_NAME.match(name):
            raise ConfigurationError(
                f"effect name {name!r}: 1-40 of a-z, 0-9, _ and -, starting with a letter"
            )
        if name in self.effects:
            raise DuplicateHandler(f"{self.name} already declares an effect named {name}")
        self.effects[name] = found = Effect(name, provider, on_outcome)
        return found

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
