"""Declaring effects and content filters, and the sandbox provider's fault requests."""

from __future__ import annotations

from typing import Any

import pytest

from handoff.consumers.app import Consumer, Handler
from handoff.consumers.providers import SandboxPayments
from handoff.core.errors import ConfigurationError
from handoff.sandbox.errors import InvalidFault
from handoff.sandbox.faults import Faults, from_header, parse


def _noop(*_: Any) -> None:
    return None


def test_effect_names_follow_the_rule_and_are_declared_once() -> None:
    app = Consumer("payments", "unused")
    app.effect("pay", provider=lambda: SandboxPayments("http://127.0.0.1:9"))
    with pytest.raises(ConfigurationError, match="already declares"):
        app.effect("pay", provider=lambda: SandboxPayments("http://127.0.0.1:9"))
    for bad in ("", "Pay", "1pay", "pay now", "p" * 41):
        with pytest.raises(ConfigurationError, match="effect name"):
            app.effect(bad, provider=lambda: SandboxPayments("http://127.0.0.1:9"))


def test_the_provider_factory_runs_once_on_first_use() -> None:
    made: list[SandboxPayments] = []

    def factory() -> SandboxPayments:
        made.append(SandboxPayments("http://127.0.0.1:9"))
        return made[-1]

    effect = Consumer("payments", "unused").effect("pay", provider=factory)
    assert made == []
    assert effect.provider is effect.provider and len(made) == 1
    effect.close()


class _EventLike:
    """Only what Handler.matches reads."""

    def __init__(self, **fields: Any) -> None:
        self.data = fields.pop("data", {})
        self.__dict__.update(fields)


def test_a_content_filter_reads_event_fields_and_data_keys() -> None:
    handler = Handler("created", _noop, "h", "1", (("status", "pending"), ("kind", "audio")))
    assert handler.matches(_EventLike(status="pending", data={"kind": "audio"}))  # type: ignore[arg-type]
    assert not handler.matches(_EventLike(status="ready", data={"kind": "audio"}))  # type: ignore[arg-type]
    assert not handler.matches(_EventLike(status="pending", data={}))  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("body", "fix"),
    [
        ([], "JSON object"),
        ({"kind": "melt"}, "kind must be one of"),
        ({"kind": "drop", "times": 0}, "times"),
        ({"kind": "delay"}, "delayMs > 0"),
        ({"kind": "refuse"}, "forS > 0"),
        ({"kind": "drop", "extra": 1}, "unknown fault fields"),
        ({"kind": "drop", "reference": 5}, "reference"),
    ],
)
def test_bad_fault_requests_say_what_to_fix(body: Any, fix: str) -> None:
    with pytest.raises(InvalidFault, match=fix):
        parse(body)


def test_header_faults_and_armed_faults_are_taken_by_matching_requests() -> None:
    assert from_header("delay=250").delay_ms == 250
    with pytest.raises(InvalidFault):
        from_header("refuse")
    faults = Faults()
    faults.arm(parse({"kind": "drop", "reference": "r1", "times": 2}))
    assert faults.take(("drop",), "r2") is None
    assert faults.take(("drop",), "r1") is not None
    assert faults.take(("drop",), "r1") is not None
    assert faults.take(("drop",), "r1") is None and faults.listing() == []
