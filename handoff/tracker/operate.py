"""The operate page: is anything stuck, and acting on it (DESIGN.md "Tracker").

It shows the relay's backlog and its oldest unpublished change, each of the
tenant's consumers' lag in Kafka (as last sampled by the server's lag
sampler, lag_sampler.py: nothing here calls Kafka), the quarantined events and the effects
waiting for a person. A signed-in service may act on what is its own: retry
or discard its consumer's quarantined events, resolve its unresolved
effects. The actions are the same functions as ``handoff quarantine`` and
``handoff effects resolve`` (run in a thread: they are blocking and rare),
so every one is recorded in the entry's audit trail with who and why.

Each form is for one action on one entry and may be used once: it carries
a nonce and a token only the signed-in session can make for that action
and nonce (sessions.py), and the nonce is recorded when the form is used.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
from collections.abc import Callable
from datetime import datetime
from typing import Any

from fastapi import Request
from pydantic import Field

from handoff.core import db, effects, quarantine
from handoff.core.errors import (
    EffectNotFound,
    HandoffError,
    InvalidRequest,
    NotPermitted,
    QuarantineEntryNotFound,
)
from handoff.core.identity import Credential
from handoff.core.kafka import describe_brokers
from handoff.core.settings import HandoffSettings
from handoff.tracker import lag_sql, sessions
from handoff.tracker import read_sql as q
from handoff.tracker.forms import read_form
from handoff.tracker.read_model import Query, Reader, ReadModel, Rows
from handoff.tracker.sessions import Session
from handoff.tracker.settings import TrackerSettings
from handoff.tracker.views import _View

log = logging.getLogger("handoff.tracker")
BACKLOG_CAP = 100_000  # pending outbox rows counted at most (a walk of the pending index)
LISTED = 100


class RelayBacklog(_View):
    pending: int = Field(description=f"unpublished changes, counted up to {BACKLOG_CAP:,}")
    capped: bool = Field(description="there are at least this many; counting stopped")
    oldest_pending_at: datetime | None
    parked: int = Field(description="this tenant's changes the relay could not serialise")


class ConsumerLag(_View):
    consumer: str
    group: str
    lag: int | None = Field(description="events not yet taken, as last sampled")
    partitions: int
    sampled_at: datetime = Field(description="when the sampler read it from Kafka")


class KafkaBrokers(_View):
    up: int = Field(description="brokers that answered the last sample")
    missing: list[int] = Field(description="node ids of brokers named as replicas but not up")
    missing_since: datetime | None = Field(description="since when a broker has been missing")
    under_replicated: int = Field(description="partitions with fewer in-sync replicas than copies")
    offline: int = Field(description="partitions without a leader (unreadable, unwritable)")

    @property
    def healthy(self) -> bool:
        return not self.missing and not self.under_replicated and not self.offline

    @property
    def summary(self) -> str:
        since = f"{self.missing_since:%Y-%m-%d %H:%M:%S} UTC" if self.missing_since else ""
        return describe_brokers(self.up, self.missing, self.under_replicated, self.offline, since)


class QuarantinedEvent(_View):
    id: int
    consumer: str
    event_id: str | None
    event_type: str | None
    document_id: str | None
    run_id: int | None
    version: int | None
    category: str
    attempts: int
    status: str
    first_failed_at: datetime
    last_failed_at: datetime
    error: str


class UnresolvedEffect(_View):
    id: int
    consumer: str
    effect: str
    document_id: str
    run_id: int
    state: str
    attempts: int
    lookups: int
    provider_ref: str | None
    owner: str
    error: str | None
    updated_at: datetime


class OperateView(_View):
    as_of: datetime
    relay: RelayBacklog
    consumers: list[ConsumerLag]
    kafka_error: str | None = Field(description="why consumer lag is not current, or null")
    lag_unavailable_since: datetime | None = Field(
        description="since when consumer lag could not be sampled (null while it can)"
    )
    kafka_brokers: KafkaBrokers | None = Field(
        description="the cluster's brokers as last sampled, or null before the first sample"
    )
    quarantine: list[QuarantinedEvent]
    unresolved_effects: list[UnresolvedEffect]


def _models(kind: type[_View]) -> Callable[[Rows], list[Any]]:
    return lambda rows: [kind.model_validate(r) for r in rows]


def _lag_unavailable(
    status: dict[str, Any], now: datetime, tracker: TrackerSettings
) -> tuple[datetime | None, str | None]:
    """Since when consumer lag is not current, and what the page says about it."""
    if tracker.lag_interval_s == 0:
        return None, "consumer lag is not sampled here (HANDOFF_TRACKER_LAG_INTERVAL_S=0)"
    failing, sampled = status["failing_since"], status["sampled_at"]
    if failing is not None:
        return failing, f"consumer lag unavailable since {failing:%Y-%m-%d %H:%M:%S} UTC: " + (
            "Kafka did not answer the sampler" if sampled is None or sampled < failing
            else "the last sample failed"
        )  # fmt: skip
    if sampled is None:
        return None, "consumer lag not sampled yet"
    # A sampler that stopped reporting (it hangs, or no tracker runs one): stale.
    if (now - sampled).total_seconds() > 3 * tracker.lag_interval_s + tracker.lag_timeout_s:
        return sampled, (
            f"consumer lag unavailable since {sampled:%Y-%m-%d %H:%M:%S} UTC: "
            "the sampler has not reported since"
        )
    return None, None


async def operate_view(
    model: ReadModel, credential: Credential | Session, tracker: TrackerSettings, cluster: str
) -> tuple[Reader, OperateView]:
    """One reader snapshot: the relay, lag as last sampled, quarantine, effects.

    Nothing here calls Kafka: lag is what the sampler (lag_sampler.py) last wrote.
    """
    reader, (backlog, lags, status, held, unresolved, now) = await model.read(
        credential,
        Query(q.RELAY_BACKLOG, {"cap": BACKLOG_CAP}, lambda rows: rows[0], system=True),
        Query(lag_sql.LAGS, {"cluster": cluster}, _models(ConsumerLag)),
        Query(lag_sql.STATUS, {"cluster": cluster}, lambda rows: rows[0]),
        Query(q.QUARANTINE_PENDING, {"limit": LISTED}, _models(QuarantinedEvent)),
        Query(q.EFFECTS_UNRESOLVED, {"limit": LISTED}, _models(UnresolvedEffect)),
        Query(q.NOW, {}, lambda rows: rows[0]["now"]),
    )
    unavailable_since, kafka_error = _lag_unavailable(status, now, tracker)
    brokers = (
        None
        if status["brokers_up"] is None
        else KafkaBrokers(
            up=status["brokers_up"],
            missing=status["brokers_missing"],
            missing_since=status["missing_since"],
            under_replicated=status["under_replicated"],
            offline=status["offline_partitions"],
        )
    )
    relay = RelayBacklog(
        pending=backlog["pending"],
        capped=backlog["pending"] >= BACKLOG_CAP,
        oldest_pending_at=backlog["oldest_pending_at"],
        parked=backlog["parked"],
    )
    view = OperateView(
        as_of=now,
        relay=relay,
        consumers=lags,
        kafka_error=kafka_error,
        lag_unavailable_since=unavailable_since,
        kafka_brokers=brokers,
        quarantine=held,
        unresolved_effects=unresolved,
    )
    return reader, view


# -- actions ---------------------------------------------------------------------------


def new_form(session: Session, action: str) -> dict[str, str]:
    """A one-time form for ``action`` (e.g. ``quarantine/7/retry``): a nonce, and a token
    only this session can make for this action and nonce."""
    nonce = secrets.token_hex(12)
    return {"nonce": nonce, "token": sessions.form_token(session, f"operate/{action}/{nonce}")}


async def _form(request: Request, session: Session, action: str) -> dict[str, str]:
    """The posted form, if it was issued to this session for this very action and was
    not used before (a replayed retry must not discard, nor retry twice)."""
    form = await read_form(request)
    nonce = form.get("nonce", "")
    sessions.check_token(session, f"operate/{action}/{nonce}", form.get("token", ""))
    if not form.get("reason"):
        raise InvalidRequest("say why: the reason is recorded in the entry's audit trail")
    await request.app.state.sessions.use_once(session, nonce)
    return form


async def act_on_quarantine(
    request: Request, session: Session, reader: Reader, entry_id: int, action: str
) -> str:
    """Retry or discard one of the signed-in service's quarantined events."""
    if action not in ("retry", "discard"):
        raise InvalidRequest("action must be retry or discard")
    form = await _form(request, session, f"quarantine/{entry_id}/{action}")
    settings: HandoffSettings = request.app.state.settings

    def act() -> None:
        with db.connect(settings.database_url, autocommit=True) as conn, db.translated():
            entry = quarantine.show_entry(conn, entry_id).fields
            what = f"quarantine entry {entry_id}"
            _own(reader, entry["tenant_id"], entry["consumer"], what, QuarantineEntryNotFound)
            decide = quarantine.request_retry if action == "retry" else quarantine.discard
            decide(conn, entry_id, actor=_actor(reader), reason=form["reason"])

    await asyncio.to_thread(act)
    return f"quarantine entry {entry_id}: {'retry requested' if action == 'retry' else 'discarded'}"


async def act_on_effect(request: Request, session: Session, reader: Reader, intent_id: int) -> str:
    """Resolve one of the signed-in service's unresolved effects."""
    form = await _form(request, session, f"effect/{intent_id}/resolve")
    outcome = form.get("outcome", "")
    if outcome not in effects.DECISIONS:
        raise InvalidRequest(f"outcome must be one of {', '.join(effects.DECISIONS)}")
    settings: HandoffSettings = request.app.state.settings

    def act() -> None:
        with db.connect(settings.database_url, autocommit=True) as conn, db.translated():
            intent = effects.show_intent(conn, intent_id).fields
            _own(
                reader, intent["tenant_id"], intent["owner"], f"effect {intent_id}", EffectNotFound
            )
            effects.resolve(
                conn,
                intent_id,
                outcome=outcome,
                actor=_actor(reader),
                reason=form["reason"],
                provider_ref=form.get("provider_ref") or None,
            )

    await asyncio.to_thread(act)
    return f"effect {intent_id}: resolved as {outcome}"


def _own(reader: Reader, tenant: str, owner: str, what: str, missing: type[HandoffError]) -> None:
    # Another tenant's entry is "not found" (nothing about it leaks); another
    # service's entry in the same tenant is visible on the page but not ours to act on.
    if tenant != reader.tenant:
        raise missing(f"no {what}")
    if owner != reader.service:
        raise NotPermitted(f"{what} belongs to {owner}; only {owner} may act on it")


def _actor(reader: Reader) -> str:
    return f"{reader.service} (tracker)"
