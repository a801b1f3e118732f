"""Faults the sandbox provider injects, per request, on request.

A fault is armed through ``POST /_sandbox/faults`` (or, for one request, the
``Sandbox-Fault`` header) and matches payment requests by ``reference`` (or
all of them) for ``times`` requests:

- ``drop``: accept and record the payment, then close the connection
  without an answer (the caller cannot know it was charged);
- ``delay``: wait ``delayMs`` before processing (a caller with a shorter
  timeout gives up; the payment is still made);
- ``error``: answer 503 without processing;
- ``decline``: record the payment as failed, answer 402;
- ``lookup_error``: status lookups answer 503 (the provider cannot say);
- ``refuse``: stop accepting connections for ``forS`` seconds.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

from handoff.sandbox.errors import InvalidFault

KINDS = ("drop", "delay", "error", "decline", "lookup_error", "refuse")
ON_PAYMENT = ("drop", "delay", "error", "decline")


@dataclass
class Fault:
    kind: str
    reference: str | None = None
    times: int = 1
    delay_ms: int = 0
    for_s: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "reference": self.reference,
            "times": self.times,
            "delayMs": self.delay_ms,
            "forS": self.for_s,
        }


def parse(body: Any) -> Fault:
    if not isinstance(body, dict):
        raise InvalidFault("a fault is a JSON object: {kind, reference?, times?, delayMs?, forS?}")
    unknown = set(body) - {"kind", "reference", "times", "delayMs", "forS"}
    if unknown:
        raise InvalidFault(f"unknown fault fields: {', '.join(sorted(unknown))}")
    kind = body.get("kind")
    if kind not in KINDS:
        raise InvalidFault(f"kind must be one of {', '.join(KINDS)}")
    reference = body.get("reference")
    if reference is not None and not isinstance(reference, str):
        raise InvalidFault("reference must be a string")
    times = body.get("times", 1)
    if not isinstance(times, int) or not 1 <= times <= 1_000_000:
        raise InvalidFault("times must be an integer from 1 to 1000000")
    delay_ms = body.get("delayMs", 0)
    if not isinstance(delay_ms, int) or not 0 <= delay_ms <= 600_000:
        raise InvalidFault("delayMs must be an integer from 0 to 600000")
    if kind == "delay" and delay_ms == 0:
        raise InvalidFault("a delay fault needs delayMs > 0")
    for_s = body.get("forS", 0)
    if not isinstance(for_s, int | float) or not 0 <= for_s <= 3600:
        raise InvalidFault("forS must be a number of seconds from 0 to 3600")
    if kind == "refuse" and for_s <= 0:
        raise InvalidFault("a refuse fault needs forS > 0")
    return Fault(kind, reference, times, delay_ms, float(for_s))


def from_header(value: str) -> Fault:
    """``Sandbox-Fault: drop`` / ``error`` / ``decline`` / ``delay=250``: this request only."""
    kind, _, arg = value.strip().partition("=")
    if kind not in ON_PAYMENT:
        raise InvalidFault(
            f"Sandbox-Fault must be one of drop, error, decline, delay=MS; not {value}"
        )
    if kind == "delay":
        if not arg.isdigit() or not 0 < int(arg) <= 600_000:
            raise InvalidFault("Sandbox-Fault: delay=MS needs MS from 1 to 600000")
        return Fault(kind, delay_ms=int(arg))
    return Fault(kind)


class Faults:
    """The armed faults; each request takes the first that matches it."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._armed: list[Fault] = []

    def arm(self, fault: Fault) -> None:
        with self._lock:
            self._armed.append(fault)

    def take(self, kinds: tuple[str, ...], reference: str | None) -> Fault | None:
        with self._lock:
            for fault in self._armed:
                if fault.kind in kinds and fault.reference in (None, reference):
                    fault.times -= 1
                    if fault.times == 0:
                        self._armed.remove(fault)
                    return fault
        return None

    def listing(self) -> list[dict[str, Any]]:
        with self._lock:
            return [fault.to_json() for fault in self._armed]

    def clear(self) -> int:
        with self._lock:
            n, self._armed = len(self._armed), []
            return n
