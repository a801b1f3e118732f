"""The chaos run's schedule and verdict (pure functions; no stack)."""

from __future__ import annotations

import pytest

from handoff.chaos.plan import DEFAULT_KINDS, KINDS, ChaosPlan
from handoff.chaos.verdict import Verdict
from handoff.core.errors import ConfigurationError


def test_every_kind_is_killed_at_least_once_even_in_a_short_run() -> None:
    plan = ChaosPlan.make(duration_s=60, every_s=30, seed=4)
    assert sorted({k.kind for k in plan.kills}) == sorted(DEFAULT_KINDS)
    moments = [k.at_s for k in plan.kills]
    assert moments == sorted(moments)
    assert moments[0] > 0 and moments[-1] <= 60 * 0.9  # time to flow again before the drain


def test_a_move_is_named_for_citus_only_and_a_kind_named_twice_comes_twice() -> None:
    assert {"move", "rebalance"} <= set(KINDS)
    assert not {"move", "rebalance"} & set(DEFAULT_KINDS)  # the default run is Patroni's
    plan = ChaosPlan.make(duration_s=50, every_s=8, seed=3, kinds=("move", "relay", "move"))
    assert [k.kind for k in plan.kills].count("move") >= 2


def test_a_seed_gives_the_same_schedule_and_another_seed_another() -> None:
    one = ChaosPlan.make(duration_s=180, seed=7).kills
    assert ChaosPlan.make(duration_s=180, seed=7).kills == one
    assert ChaosPlan.make(duration_s=180, seed=8).kills != one
    assert len(one) == int(180 * 0.9 // 15)  # one kill per slot of every_s


def test_only_the_chosen_kinds_are_killed() -> None:
    plan = ChaosPlan.make(duration_s=120, kinds=("relay", "api"))
    assert {k.kind for k in plan.kills} == {"relay", "api"}


@pytest.mark.parametrize(
    ("options", "said"),
    [
        ({"kinds": ("relay", "disk")}, "unknown kill kind"),
        ({"duration_s": 5}, "at least 10 s"),
        ({"rate": 0}, "above 0"),
    ],
)
def test_a_plan_that_cannot_run_is_refused_with_what_to_fix(
    options: dict[str, object], said: str
) -> None:
    with pytest.raises(ConfigurationError, match=said):
        ChaosPlan.make(**options)


def test_a_verdict_holds_only_with_no_breach_and_names_each_one() -> None:
    assert Verdict(documents=10).ok
    broken = Verdict(documents=10, lost=1, unpaid=["invoice-000003 (review, routed, v2)"])
    assert not broken.ok
    lost, unpaid = broken.breaches()
    assert lost == "1 lost receipts"
    assert unpaid.startswith("1 documents not in their final state (e.g. invoice-000003")
