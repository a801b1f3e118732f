"""``handoff backlog --experiment``: completion capacity at increasing concurrency.

Runs the consumer app with 1, 2, 4, … processes, one step each, against the
backlog that is there (this is recovery work: it drains what it measures),
and records per step the completed business events per second, the gain
over the step before, quarantine growth, provider trouble (effects that
ended failed or unknown), and database lock waits. It stops at the first
dependency limit the playbook names: workers that add no completion (a hot
partition, a saturated database), quarantine growing, a provider rejecting,
or the backlog gone. More processes than partitions are idle in Kafka: the
table says so rather than hiding it.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import psycopg

from handoff.core import kafka as lag
from handoff.core.db import translated
from handoff.core.errors import ConfigurationError
from handoff.core.identity import Credential
from handoff.core.settings import HandoffSettings, default_home
from handoff.operate import backlog_sql as q

MIN_GAIN = 0.10  # a step that adds less than this is at a limit


@dataclass(frozen=True)
class Step:
    workers: int
    completed_per_s: float
    gain: float | None
    quarantined: int
    provider_trouble: int
    lock_waits: int
    backlog_left: int
    verdict: str


def _count(conn: psycopg.Connection[Any], sql: Any, params: dict[str, Any]) -> int:
    with translated():
        return int(conn.execute(sql, params).fetchone()[0])  # type: ignore[index]


def experiment(
    settings: HandoffSettings,
    app_target: str,
    credential: Credential,
    *,
    levels: list[int],
    step_s: float = 20.0,
    warmup_s: float = 3.0,
    say: Callable[[str], None] = lambda _: None,
) -> list[Step]:
    with psycopg.connect(settings.database_url, autocommit=True) as conn:
        with translated():
            found = conn.execute(q.SERVICE_OF_ROLE, {"role": credential.role}).fetchone()
        if found is None:
            raise ConfigurationError("the consumer credential is not a registered service")
        tenant, consumer = found
        group = lag.group_of(tenant, consumer)
        steps: list[Step] = []
        for workers in levels:
            say(f"{workers} worker(s): {warmup_s:g} s to start, then {step_s:g} s measured")
            procs = [_start(app_target, credential, i) for i in range(workers)]
            try:
                time.sleep(warmup_s)
                since = conn.execute(q.NOW).fetchone()[0]  # type: ignore[index]
                started = time.monotonic()
                waits = 0
                while time.monotonic() - started < step_s:
                    row = conn.execute(q.LOCK_WAITS).fetchone()
                    waits = max(waits, int(row[0]) if row else 0)
                    time.sleep(min(1.0, step_s))
                    if any(p.poll() is not None for p in procs):
                        raise ConfigurationError(
                            f"a consumer process exited ({app_target}); see "
                            f"{default_home() / 'logs'}/experiment-*.log"
                        )
                seconds = time.monotonic() - started
                params = {"tenant": tenant, "consumer": consumer, "since": since}
                done = _count(conn, q.CONSUMER_WORK_SINCE, params)
                held = _count(conn, q.QUARANTINED_SINCE, params)
                trouble = _count(conn, q.PROVIDER_TROUBLE_SINCE, params)
            finally:
                _stop(procs)
            left = sum(p.lag for p in lag.group_positions_isolated(settings.kafka_bootstrap,
                                                          [group])[group])  # fmt: skip
            rate = done / seconds
            gain = (
                (rate / steps[-1].completed_per_s - 1)
                if steps and steps[-1].completed_per_s
                else None
            )
            verdict = _verdict(workers, rate, gain, held, trouble, waits, left, steps)
            steps.append(Step(workers, rate, gain, held, trouble, waits, left, verdict))
            say(f"  {rate:.1f}/s completed; {verdict}")
            if not verdict.startswith("more"):
                break
    return steps


def _verdict(
    workers: int, rate: float, gain: float | None, held: int, trouble: int, waits: int,
    left: int, steps: list[Step],
) -> str:  # fmt: skip
    if held:
        return f"stop: {held} event(s) quarantined during the step"
    if trouble:
        return f"stop: the provider failed or did not answer {trouble} time(s)"
    if waits >= max(2, workers):
        return f"stop: database saturated ({waits} backends waiting on locks)"
    if left == 0:
        return "stop: backlog drained (capacity above arrivals at this level)"
    if gain is not None and gain < MIN_GAIN:
        return (f"stop: +{gain:.0%} from {steps[-1].workers} to {workers} workers: a dependency "
                "limit (a hot partition, the database, fewer partitions than workers)")  # fmt: skip
    return "more workers helped" if steps else "more workers may help"


def _start(app_target: str, credential: Credential, index: int) -> subprocess.Popen[bytes]:
    env = {**os.environ, "HANDOFF_CONSUMER_CREDENTIAL": credential.token}
    logs = default_home() / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    with (logs / f"experiment-{index}.log").open("ab") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "handoff.cli", "consume", app_target],
            env=env, stdout=out, stderr=subprocess.STDOUT,
        )  # fmt: skip


def _stop(procs: list[subprocess.Popen[bytes]]) -> None:
    for proc in procs:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
    for proc in procs:
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)
