"""Providers: what an executor performs intents against.

A provider answers two questions, both by the intent's idempotency key:
``submit`` (perform the operation; the same key with the same request must
give the original result) and ``status`` (what became of the operation sent
with this key, or None when it never arrived). Failures are told apart by
what they prove (core/errors.py): ``ProviderNotReached`` (nothing was sent:
sending again is safe), ``ProviderOutcomeUnknown`` (it may have happened:
look it up first), ``ProviderRefused`` (a final no).

``SandboxPayments`` talks to ``handoff sandbox-provider``; write your own
class with the same two methods for a real provider; sending
``trace_context.caller_headers()`` with its request continues the trace of the
intent's unit (telemetry/tracing.py), as ``SandboxPayments`` does.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Protocol

import httpx

from handoff.core import trace_context
from handoff.core.errors import ProviderNotReached, ProviderOutcomeUnknown, ProviderRefused


@dataclass(frozen=True)
class Answer:
    """A provider's final word on an operation."""

    succeeded: bool
    reference: str | None
    body: dict[str, Any]


class Provider(Protocol):
    def submit(self, key: str, request: dict[str, Any]) -> Answer: ...

    def status(self, key: str) -> Answer | None: ...

    def close(self) -> None: ...


class SandboxPayments:
    """The sandbox provider's payments API (handoff/sandbox/server.py)."""

    def __init__(self, base_url: str, *, timeout_s: float = 5.0) -> None:
        self.base_url = base_url.rstrip("/")
        # A connect timeout proves nothing was sent; a read timeout does not.
        self._http = httpx.Client(
            base_url=self.base_url,
            timeout=httpx.Timeout(timeout_s, connect=min(timeout_s, 2.0)),
        )

    def submit(self, key: str, request: dict[str, Any]) -> Answer:
        try:
            answer = self._http.post(
                "/v1/payments",
                json=request,
                headers={"Idempotency-Key": key, **trace_context.caller_headers()},
            )
        except (httpx.ConnectError, httpx.ConnectTimeout) as exc:
            raise ProviderNotReached(f"{self.base_url}: {exc or type(exc).__name__}") from exc
        except httpx.TransportError as exc:
            raise ProviderOutcomeUnknown(
                f"{self.base_url}: no answer ({type(exc).__name__}: {exc})"
            ) from exc
        return self._final(answer)

    def status(self, key: str) -> Answer | None:
        try:
            answer = self._http.get(f"/v1/payments/by-key/{key}")
        except httpx.TransportError as exc:
            raise ProviderOutcomeUnknown(
                f"{self.base_url}: the status lookup failed ({type(exc).__name__}: {exc})"
            ) from exc
        if answer.status_code == 404:
            return None
        return self._final(answer)

    def payments(self, reference: str) -> list[dict[str, Any]]:
        """Every payment the provider holds for a business reference (the auditor's evidence)."""
        try:
            answer = self._http.get("/v1/payments", params={"reference": reference, "limit": 1000})
            answer.raise_for_status()
        except httpx.HTTPError as exc:
            raise ProviderOutcomeUnknown(
                f"{self.base_url}: listing payments failed ({type(exc).__name__}: {exc})"
            ) from exc
        found: list[dict[str, Any]] = answer.json()["payments"]
        return found

    def every_payment(self, page: int = 500) -> Iterator[dict[str, Any]]:
        """Every payment the provider holds, in the order they were made, a page at a time
        (the auditor's other direction: charges Handoff may not know of)."""
        after: str | None = "0"
        while after is not None:
            try:
                answer = self._http.get("/v1/payments", params={"limit": page, "after": after})
                answer.raise_for_status()
            except httpx.HTTPError as exc:
                raise ProviderOutcomeUnknown(
                    f"{self.base_url}: listing payments failed ({type(exc).__name__}: {exc})"
                ) from exc
            body = answer.json()
            yield from body["payments"]
            after = body.get("next")

    def _final(self, answer: httpx.Response) -> Answer:
        if answer.status_code >= 500 or answer.status_code in (408, 429):
            # The provider may or may not have acted: only a lookup can tell.
            raise ProviderOutcomeUnknown(
                f"{self.base_url}: answered {answer.status_code} {answer.text[:200]}"
            )
        try:
            body = answer.json()
        except ValueError as exc:
            raise ProviderOutcomeUnknown(
                f"{self.base_url}: answered {answer.status_code} without JSON"
            ) from exc
        if answer.status_code == 402:  # declined: a payment that failed, recorded as such
            return Answer(False, body.get("id"), body)
        if answer.status_code >= 400:
            raise ProviderRefused(
                f"{self.base_url}: {answer.status_code} {body.get('code')}: {body.get('message')}",
                status=answer.status_code,
                body=body,
            )
        return Answer(body.get("status") == "succeeded", body.get("id"), body)

    def close(self) -> None:
        self._http.close()
