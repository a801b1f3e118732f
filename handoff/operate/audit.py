"""``handoff audit``: prove the invariants hold, or show the rows that break them.

Per tenant (or all): owner counts equal the documents' owners; deadline
counters equal the documents' deadlines; versions are gapless 1..n per
document run and the state holds n; every version accepted within the
relay's retention window is in the outbox (and what is not yet published is
reported with its age); every quarantined event and unresolved effect has
an owner that still exists; with a provider named, every succeeded effect
appears exactly once at the provider, and every charge the provider made
under one of Handoff's idempotency keys has a succeeded effect behind it.

One snapshot for the database checks (REPEATABLE READ, READ ONLY); rows
streamed through server-side cursors and only the first few kept per check,
so memory does not grow with the number of documents or of breaches.
"""

from __future__ import annotations

import itertools
import re
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, LiteralString

import psycopg
from psycopg.rows import dict_row

from handoff.consumers.providers import SandboxPayments
from handoff.core.db import translated
from handoff.core.errors import ProviderError
from handoff.core.names import SERVICE_NAME_PATTERN
from handoff.operate import audit_sql as q

SAMPLE = 20  # offending rows kept per check


@dataclass(frozen=True)
class Check:
    name: str
    invariant: str
    sql: LiteralString


CHECKS = (
    Check("counts", "per-owner counters equal the documents each owner holds", q.COUNTS),
    Check("due-counts", "deadline counters equal the documents' deadlines", q.DUE_COUNTS),
    Check("versions", "versions are 1..n per document run, n the state's version", q.VERSIONS),
    Check(
        "outbox", "every version accepted in the relay's window is in the outbox", q.OUTBOX_MISSING
    ),
    Check(
        "owners",
        "every quarantined event and unresolved effect has a registered owner",
        q.OWNERLESS,
    ),
)


@dataclass
class Finding:
    check: str
    invariant: str
    breaches: int = 0
    rows: list[dict[str, Any]] = field(default_factory=list)
    seconds: float = 0.0
    note: str | None = None

    @property
    def ok(self) -> bool:
        return self.breaches == 0

    def add(self, row: dict[str, Any], keep: int) -> None:
        self.breaches += 1
        if len(self.rows) < keep:
            self.rows.append(row)


@dataclass
class Report:
    tenant: str | None
    started_at: datetime
    findings: list[Finding]
    pending: int
    oldest_pending_at: datetime | None
    parked: int

    @property
    def ok(self) -> bool:
        return all(f.ok for f in self.findings)

    @property
    def breaches(self) -> int:
        return sum(f.breaches for f in self.findings)


def _stream(
    conn: psycopg.Connection[Any], name: str, sql: LiteralString, params: dict[str, Any]
) -> Iterator[dict[str, Any]]:
    """Rows of ``sql`` through a server-side cursor, a thousand at a time."""
    with conn.cursor(name=f"audit_{name.replace('-', '_')}", row_factory=dict_row) as cur:
        cur.itersize = 1000
        cur.execute(sql, params)
        yield from cur


def audit(
    conn: psycopg.Connection[Any],
    *,
    tenant: str | None = None,
    outbox_window_s: float = 24 * 3600,
    providers: dict[str, str] | None = None,
    keep: int = SAMPLE,
    progress: Callable[[str], None] = lambda _: None,
) -> Report:
    """Run every check; ``providers`` maps an effect name to a payments API base URL
    (the sandbox provider's API) for the check that succeeded effects exist there once."""
    params = {"tenant": tenant, "window_s": outbox_window_s}
    findings: list[Finding] = []
    with translated(), conn.transaction():
        conn.execute(q.SNAPSHOT)
        started_at = conn.execute(q.NOW).fetchone()[0]  # type: ignore[index]
        for check in CHECKS:
            progress(f"checking {check.name}: {check.invariant}")
            finding = Finding(check.name, check.invariant)
            clock = time.perf_counter()
            for row in _stream(conn, check.name, check.sql, params):
                finding.add(row, keep)
            finding.seconds = time.perf_counter() - clock
            findings.append(finding)
        with conn.cursor(row_factory=dict_row) as cur:
            waiting = cur.execute(q.OUTBOX_PENDING, params).fetchone() or {}
        for effect, url in (providers or {}).items():
            progress(f"checking effect {effect!r} against the provider at {url}")
            findings.append(_provider_check(conn, effect, url, params, keep))
    for effect, url in (providers or {}).items():  # outside the snapshot: see INTENTS_BY_KEY
        progress(f"checking the provider's charges at {url} against effect {effect!r}")
        findings.append(_charges_check(conn, effect, url, tenant, keep))
    return Report(
        tenant=tenant,
        started_at=started_at,
        findings=findings,
        pending=int(waiting.get("pending") or 0),
        oldest_pending_at=waiting.get("oldest_pending_at"),
        parked=int(waiting.get("parked") or 0),
    )


def _provider_check(
    conn: psycopg.Connection[Any], effect: str, url: str, params: dict[str, Any], keep: int
) -> Finding:
    """For each business reference: the provider's succeeded payments are exactly the
    succeeded intents Handoff recorded for it, one each (same ids, same count)."""
    finding = Finding(
        f"effects:{effect}",
        f"every succeeded {effect!r} effect appears exactly once at the provider",
    )
    clock = time.perf_counter()
    provider = SandboxPayments(url)
    try:
        rows = _stream(conn, "effects", q.SUCCEEDED_EFFECTS,
                       {**params, "effect": effect})  # fmt: skip
        for reference, group in itertools.groupby(rows, key=lambda r: r["reference"]):
            intents = list(group)  # one business reference: a handful of rows
            if reference is None:
                for intent in intents:
                    finding.add({**_brief(intent), "problem": "no reference to look up"}, keep)
                continue
            try:
                paid = [p for p in provider.payments(reference) if p["status"] == "succeeded"]
            except ProviderError as exc:
                finding.add({"reference": reference, "problem": f"provider: {exc}"}, keep)
                continue
            recorded = {i["provider_ref"] for i in intents}
            if params.get("tenant") is not None and len(paid) != len(intents):
                paid = _without_other_tenants(conn, effect, paid, params["tenant"], recorded)
            at_provider = [p["id"] for p in paid]
            if len(at_provider) != len(intents) or set(at_provider) != recorded:
                finding.add(
                    {"reference": reference, "recorded": sorted(map(str, recorded)),
                     "at_provider": at_provider,
                     "problem": f"{len(intents)} succeeded in Handoff, "
                                f"{len(at_provider)} at the provider"},
                    keep,
                )  # fmt: skip
    finally:
        provider.close()
    finding.seconds = time.perf_counter() - clock
    return finding


def _without_other_tenants(
    conn: psycopg.Connection[Any], effect: str, paid: list[dict[str, Any]], tenant: str,
    recorded: set[Any],
) -> list[dict[str, Any]]:  # fmt: skip
    """The payments of one reference less those another tenant's intents made: tenants
    share a provider, and two tenants' documents may carry the same reference
    (both have an invoice-42); a tenant's audit must not count the other's charge."""
    keys = [p["idempotencyKey"] for p in paid if p["id"] not in recorded]
    if not keys:
        return paid
    with translated(), conn.cursor(row_factory=dict_row) as cur:
        cur.execute(q.INTENTS_BY_KEY, {"effect": effect, "keys": keys})
        theirs = {r["idempotency_key"] for r in cur if r["tenant_id"] != tenant}
    return [p for p in paid if p["idempotencyKey"] not in theirs]


def handoff_key(effect: str) -> re.Pattern[str]:
    """The shape of the idempotency keys Handoff gives ``effect``'s intents:
    ``<consumer>.<effect>.<32 hex>`` (effect_intend, handoff/sql/effects.sql). Charges under other
    keys are another system's business, not Handoff's."""
    return re.compile(rf"{SERVICE_NAME_PATTERN}\.{re.escape(effect)}\.[0-9a-f]{{32}}")


# An intent on its way (claimed, submitted, unknown: a lookup settles it) may have
# been charged already; that is no breach. Any other state behind a charge is.
IN_FLIGHT = frozenset({"claimed", "submitted", "unknown"})


def _charges_check(
    conn: psycopg.Connection[Any], effect: str, url: str, tenant: str | None, keep: int
) -> Finding:
    """Every succeeded charge at the provider under one of Handoff's keys for ``effect``
    has an intent that succeeded (or is still on its way); none without one."""
    finding = Finding(
        f"charges:{effect}",
        f"every charge at the provider under a Handoff key of {effect!r} has an effect "
        "that succeeded behind it",
    )
    clock = time.perf_counter()
    shape = handoff_key(effect)
    provider = SandboxPayments(url)
    try:
        charges = (
            p
            for p in provider.every_payment()
            if p["status"] == "succeeded" and shape.fullmatch(p["idempotencyKey"])
        )
        while page := list(itertools.islice(charges, 500)):  # memory: a page at a time
            keys = [p["idempotencyKey"] for p in page]
            with translated(), conn.cursor(row_factory=dict_row) as cur:
                cur.execute(q.INTENTS_BY_KEY, {"effect": effect, "keys": keys})
                found = {r["idempotency_key"]: r for r in cur}
            for charge in page:
                intent = found.get(charge["idempotencyKey"])
                problem = _charge_problem(intent, tenant)
                if problem is not None:
                    # The same columns on every row (the table takes them from the first).
                    brief = _brief(intent) if intent else dict.fromkeys(_BRIEF)
                    finding.add({"payment": charge["id"], "key": charge["idempotencyKey"],
                                 "reference": charge["reference"], "amount": charge["amount"],
                                 **brief, "problem": problem}, keep)  # fmt: skip
    except ProviderError as exc:
        finding.add({"problem": f"provider: {exc}"}, keep)
    finally:
        provider.close()
    finding.seconds = time.perf_counter() - clock
    return finding


def _charge_problem(intent: dict[str, Any] | None, tenant: str | None) -> str | None:
    """What is wrong with a charge whose intent is ``intent`` (None: there is none)."""
    if intent is None:
        return "charged, but Handoff has no intent with this key (an orphan charge)"
    if tenant is not None and intent["tenant_id"] != tenant:
        return None  # another tenant's: its own audit says
    if intent["state"] == "succeeded" or intent["state"] in IN_FLIGHT:
        return None
    return f"charged, but Handoff recorded the effect as {intent['state']}"


_BRIEF = ("id", "tenant_id", "consumer", "provider_ref")


def _brief(intent: dict[str, Any]) -> dict[str, Any]:
    return {k: intent[k] for k in _BRIEF}
