"""What a chaos run does and when: its options and the kill schedule drawn from a seed."""

from __future__ import annotations

import dataclasses
import random
from dataclasses import dataclass, field

from handoff.core.errors import ConfigurationError

# What can be killed. Processes are SIGKILLed and restarted by the supervisor;
# a broker is SIGKILLed and started again; the primary is SIGKILLed with its
# Patroni, a standby is promoted, and the old primary rejoins as a standby.
# On Citus, a move is not a kill but a change of place under load: the run's
# tenant is isolated to a shard of its own, then moved to another worker; a
# rebalance adds a worker and spreads the shards onto it, then (the next time,
# or at the run's end) drains that worker and removes it.
PROCESS_KINDS = ("relay", "consumer", "executor", "api")
NODE_KINDS = ("broker", "primary")
CITUS_KINDS = ("move", "rebalance")
KINDS = (*PROCESS_KINDS, *NODE_KINDS, *CITUS_KINDS)
# What a run does when no --kinds is given: all but the Citus ones, on the
# clustered stack (Patroni and three brokers).
DEFAULT_KINDS = (*PROCESS_KINDS, *NODE_KINDS)


@dataclass(frozen=True)
class Kill:
    at_s: float  # seconds after the load starts
    kind: str


@dataclass(frozen=True)
class ChaosPlan:
    duration_s: float = 180.0  # how long the load runs and faults are injected
    rate: float = 8.0  # documents created per second
    every_s: float = 15.0  # mean time between kills
    seed: int = 1
    poison: int = 3  # documents planted to fail at routing (and be quarantined)
    provider_faults: float = 0.08  # share of payments that meet a provider fault
    kinds: tuple[str, ...] = DEFAULT_KINDS
    drain_timeout_s: float = 300.0
    kills: list[Kill] = field(default_factory=list)

    @classmethod
    def make(cls, **options: object) -> ChaosPlan:
        plan = cls(**options)  # type: ignore[arg-type]
        unknown = sorted(set(plan.kinds) - set(KINDS))
        if unknown:
            raise ConfigurationError(
                f"unknown kill kind(s) {', '.join(unknown)}; the kinds are {', '.join(KINDS)}"
            )
        if plan.duration_s < 10 or plan.rate <= 0 or plan.every_s <= 0:
            raise ConfigurationError("--for must be at least 10 s, --rate and --every above 0")
        return dataclasses.replace(plan, kills=plan.schedule())

    @property
    def documents(self) -> int:
        return max(1, int(self.duration_s * self.rate))

    def schedule(self) -> list[Kill]:
        """Kill moments over the run: every kind at least once, the rest drawn at random,
        one kill in each slot of about ``every_s`` (shorter when the run is too short for
        every kind). The last slot ends at nine tenths of the run, so the pipeline flows
        again before the drain."""
        rng = random.Random(self.seed)
        end = self.duration_s * 0.9
        count = max(len(self.kinds), int(end // self.every_s))
        slot = end / count
        kinds = list(self.kinds)
        rng.shuffle(kinds)
        kinds += [rng.choice(self.kinds) for _ in range(count - len(kinds))]
        return [Kill(round(slot * (i + rng.uniform(0.2, 0.8)), 1), kind)
                for i, kind in enumerate(kinds)]  # fmt: skip

    def describe(self) -> str:
        counts: dict[str, int] = {}
        for kill in self.kills:
            counts[kill.kind] = counts.get(kill.kind, 0) + 1
        kills = ", ".join(f"{k} x{n}" for k, n in sorted(counts.items())) or "none"
        return (
            f"{self.documents} documents at {self.rate:g}/s over {self.duration_s:g} s "
            f"(seed {self.seed}); kills: {kills}"
        )
