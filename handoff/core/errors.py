"""The one error hierarchy of Handoff.

Adapters (psycopg, Kafka, the registry, subprocesses of the local stack)
translate their failures into these classes at their edge. HTTP status
codes are assigned only in ``tracker/``; the CLI turns them into messages.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar


class HandoffError(Exception):
    """Base of every error Handoff raises on purpose.

    ``sqlstates``: the SQLSTATEs of Handoff's own SQL functions that raise this
    error, with a message written for the caller (``RAISE ... USING ERRCODE``);
    core/db.py translates them through ``lookup``, as psycopg's ``errors.lookup``
    does for PostgreSQL's own.
    """

    sqlstates: ClassVar[tuple[str, ...]] = ()

    @property
    def code(self) -> str:
        """Machine-readable code: the class name, as in HTTP error bodies."""
        return type(self).__name__


class ConfigurationError(HandoffError):
    """A setting is missing or wrong; the message says which and how to fix it."""


class OperationRefused(HandoffError):
    """An operator's action that cannot be done as asked; the message says why and what
    would make it possible."""


class ReplayRefused(OperationRefused):
    """A replay plan cannot run as asked (not approved, changed, another handler revision)."""


class ProjectionRefused(OperationRefused):
    """A projection cannot be used as asked (differences, unknown, in use by readers)."""


class RetentionTooShort(OperationRefused):
    """A retention shorter than the replay window: it would reopen duplicate effects."""


class RebalanceFailed(OperationRefused):
    """A Citus rebalance ended failed or cancelled; its tasks' messages say why."""


class StackError(HandoffError):
    """The local stack could not be brought up, stopped or inspected."""


class PrerequisiteMissing(StackError):
    """A tool the local stack needs (Java, Maven) is not installed."""


class DownloadFailed(StackError):
    """Fetching Kafka or registry artifacts from Maven Central failed."""


class ServiceStartFailed(StackError):
    """A part of the stack did not become healthy in time."""


# -- the emit contract ---------------------------------------------------------------


class ContractError(HandoffError):
    """A request the contract refused. Carries what the caller may see of the state."""

    def __init__(
        self,
        message: str,
        *,
        current_version: int | None = None,
        current_owner: str | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.current_version = current_version
        self.current_owner = current_owner


class InvalidRequest(ContractError):
    """The request is malformed (missing field, bad value); fix it, do not retry as is."""

    # The naming rule or an instant's range (_emit), a missing field (_emit_contract),
    # an effect's request changed (22H01, effect_intend) or a workflow run's input
    # changed (22H02, workflow_start).
    sqlstates = ("22H00", "22023", "22H01", "22H02")


class Unauthenticated(ContractError):
    """No credential, or one that maps to no service."""

    sqlstates = ("28000",)  # a session role that is no active service (0003, 0004)


class SenderMismatch(ContractError):
    """The request names a sender other than the authenticated service."""


class NotPermitted(ContractError):
    """The service may not do this (e.g. create documents without --can-create)."""


class UnknownOwner(ContractError):
    """The next owner is not a registered service of the tenant; register it first."""


class DocumentNotFound(ContractError):
    """No such document (or run) in the caller's tenant."""


class OwnershipMismatch(ContractError):
    """The sender does not own the document's current run."""


class VersionMismatch(ContractError):
    """The document moved past ``expected_version``; re-read it before deciding again."""


class ConflictingEventReuse(ContractError):
    """The event id was already accepted with other content; mint a new id for a new change."""


class AlreadyExists(ContractError):
    """The document (or the run being started) already exists."""


class RunInProgress(ContractError):
    """A new run was asked for while the latest run is still owned."""


class OutcomeUnknown(HandoffError):
    """The request may or may not have been applied (timeout, lost connection).

    Retry the identical request with the same event id: it returns the
    original receipt if the first attempt was accepted. Never mint a new id.
    """


class TransientConflict(HandoffError):
    """A serialization failure or deadlock reached the transaction; safe to retry as is."""


class EventNotClaimed(HandoffError):
    """A consumer's claim refused its event (migration 0011): not to be applied now.
    The unit rolls back and the event is judged again, verdict first."""

    sqlstates = ("P0H00",)


class UnitRolledBack(HandoffError):
    """COMMIT found the unit's transaction failed: a statement's error was caught and the
    unit went on. PostgreSQL would answer that COMMIT with a rollback; nothing was kept."""


class NotQueueable(HandoffError):
    """A unit being made to be sent ahead (core/unit_queue.py) needed the connection now:
    a read whose result it uses, or a call that uses the connection itself. The unit is
    made again and sent the usual way."""


class Unavailable(HandoffError):
    """The server or database could not be reached; nothing was sent, retry freely."""


class DatabaseUnavailable(Unavailable):
    """The database could not be reached, or the session with it broke."""


class LoginRefused(ConfigurationError):
    """The database refused the login: a wrong password or user, no such database.
    Retrying as is cannot help; the message says what to fix."""


class KafkaUnavailable(Unavailable):
    """Kafka did not answer in time, or the lookup's process ended without an answer."""


class EventEncodingError(HandoffError):
    """An outbox row that cannot be turned into an event of the current schema (it is parked)."""


class NothingParked(HandoffError):
    """``handoff outbox unpark``: the document has no parked outbox row."""


class ServiceExists(HandoffError):
    """``service add`` for a service that is already registered in that tenant."""


class ServiceNotFound(HandoffError):
    """A service that is not registered in that tenant."""


class ServiceInUse(HandoffError):
    """Removing a service that still owns documents; hand them on (or finish them) first."""


# -- consumers -----------------------------------------------------------------------


class QuarantineEntryNotFound(HandoffError):
    """No quarantine entry with that id."""


class QuarantineEntryClosed(HandoffError):
    """The entry was already resolved or discarded; nothing is left to decide."""


class MalformedEvent(HandoffError):
    """A message that cannot be read as an event: bytes, schema id or envelope."""


class HandlerMissing(ConfigurationError):
    """A consumer was started without a handler for what it was asked to handle."""


class DuplicateHandler(ConfigurationError):
    """Two handlers claim one event type of one consumer (or two effects one name)."""


# -- effects ---------------------------------------------------------------------------


class EffectNotFound(HandoffError):
    """No effect intent with that id."""


class EffectNotUnresolved(HandoffError):
    """Only an unresolved intent (one waiting for a person) can be resolved by hand."""


class ProviderError(HandoffError):
    """A provider call did not end with an answer the executor can record as final."""


class ProviderNotReached(ProviderError):
    """Nothing reached the provider (connection refused): sending again is safe."""


class ProviderOutcomeUnknown(ProviderError):
    """The request may have reached the provider and its answer was lost (a timeout,
    a dropped connection, a 5xx): ask the provider before sending again."""


class ProviderRefused(ProviderError):
    """The provider answered with a final refusal (a decline, a key reused with other
    parameters): the effect failed."""

    def __init__(self, message: str, *, status: int, body: Any = None) -> None:
        super().__init__(message)
        self.status = status
        self.body = body


CONTRACT_ERRORS: dict[str, type[ContractError]] = {
    cls.__name__: cls
    for cls in (
        InvalidRequest,
        UnknownOwner,
        Unauthenticated,
        SenderMismatch,
        NotPermitted,
        DocumentNotFound,
        OwnershipMismatch,
        VersionMismatch,
        ConflictingEventReuse,
        AlreadyExists,
        RunInProgress,
    )
}


# The SQLSTATE of an unawaited emit's refusal (emit_direct_or_raise, contract.sql):
# its message is the emit's JSON answer, which contract_error reads.
REFUSED_UNAWAITED = "P0H01"


def contract_error(answer: Mapping[str, Any]) -> ContractError:
    """The typed error a refusal names: ``{"code", "message", "currentVersion", "currentOwner"}``.

    The emit function's answers and the HTTP error bodies share this shape.
    """
    error = CONTRACT_ERRORS.get(str(answer.get("code")), InvalidRequest)
    return error(
        str(answer.get("message") or answer.get("code")),
        current_version=answer.get("currentVersion"),
        current_owner=answer.get("currentOwner"),
    )


def lookup(sqlstate: str | None) -> type[HandoffError] | None:
    """The error class that Handoff's SQL raises with ``sqlstate``, if one does."""
    return _BY_SQLSTATE.get(sqlstate or "")


def _all(cls: type[HandoffError]) -> list[type[HandoffError]]:
    return [cls, *(sub for direct in cls.__subclasses__() for sub in _all(direct))]


_BY_SQLSTATE: dict[str, type[HandoffError]] = {
    state: cls for cls in _all(HandoffError) for state in cls.sqlstates
}
