"""Races on one version, duplicate storms, and a crossing workload, with threads and processes."""

from __future__ import annotations

import multiprocessing
import random
import threading
import uuid
from collections import Counter
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest

from handoff.core import errors
from handoff.core.client import HandoffClient
from handoff.core.identity import Credential
from handoff.core.models import Receipt
from tests.fix_contract import (
    ClientFactory,
    ServiceFactory,
    counts,
    deadlocks,
    due_counts_both,
    owner_and_version,
)

RACERS = 12


def _setup(connect: ClientFactory, service: ServiceFactory) -> tuple[Credential, Credential]:
    owner = service("owner", can_create=True)
    service("next")
    connect(owner).create(
        event_id=str(uuid.uuid4()), document_id="hot", owner="owner", status="new"
    )
    return owner, service("spare")


def _race(client: HandoffClient, barrier: threading.Barrier, event_id: str) -> str:
    barrier.wait()
    try:
        receipt = client.emit(
            event_id=event_id,
            event_type="moved",
            document_id="hot",
            next_owner="next",
            status="moved",
            expected_version=1,
        )
    except errors.ContractError as exc:
        return exc.code
    return "replayed" if receipt.replayed else "accepted"


def _facts(admin: psycopg.Connection[Any], tenant: str) -> tuple[Any, ...]:
    one = admin.execute(
        "SELECT (SELECT version FROM handoff.document_state WHERE tenant_id = %(t)s),"
        " (SELECT count(*) FROM handoff.receipts WHERE tenant_id = %(t)s),"
        " (SELECT count(*) FROM handoff.outbox WHERE tenant_id = %(t)s),"
        " (SELECT count(*) FROM handoff.document_history WHERE tenant_id = %(t)s)",
        {"t": tenant},
    ).fetchone()
    assert one is not None
    return tuple(one)


def test_racers_on_one_version_threads(
    connect: ClientFactory, service: ServiceFactory, admin: psycopg.Connection[Any], tenant: str
) -> None:
    owner, _ = _setup(connect, service)
    clients = [connect(owner) for _ in range(RACERS)]
    barrier = threading.Barrier(RACERS)
    with ThreadPoolExecutor(RACERS) as pool:
        outcomes = Counter(pool.map(lambda c: _race(c, barrier, str(uuid.uuid4())), clients))
    assert outcomes == {"accepted": 1, "OwnershipMismatch": RACERS - 1}
    assert _facts(admin, tenant) == (2, 2, 2, 2)
    assert counts(admin, tenant) == {"next": 1}


def test_identical_duplicates_threads(
    connect: ClientFactory, service: ServiceFactory, admin: psycopg.Connection[Any], tenant: str
) -> None:
    owner, _ = _setup(connect, service)
    clients = [connect(owner) for _ in range(RACERS)]
    barrier = threading.Barrier(RACERS)
    same = str(uuid.uuid4())
    with ThreadPoolExecutor(RACERS) as pool:
        outcomes = Counter(pool.map(lambda c: _race(c, barrier, same), clients))
    assert outcomes == {"accepted": 1, "replayed": RACERS - 1}
    assert _facts(admin, tenant) == (2, 2, 2, 2)  # one version, one receipt, one outbox row


def _process_racer(token: str, url: str, event_id: str, start_at: float) -> str:
    import time

    with HandoffClient.direct(token, url, pool_size=1) as client:
        time.sleep(max(0.0, start_at - time.time()))
        try:
            receipt = client.emit(
                event_id=event_id,
                event_type="moved",
                document_id="hot",
                next_owner="next",
                status="moved",
                expected_version=1,
            )
        except errors.ContractError as exc:
            return exc.code
        return "replayed" if receipt.replayed else "accepted"


@pytest.mark.parametrize("duplicates", [False, True], ids=["racers", "duplicates"])
@pytest.mark.slow
def test_processes(
    migrated: Any,
    service: ServiceFactory,
    admin: psycopg.Connection[Any],
    tenant: str,
    duplicates: bool,
) -> None:
    import time

    owner = service("owner", can_create=True)
    service("next")
    with HandoffClient.direct(owner, migrated.database_url) as client:
        client.create(event_id=str(uuid.uuid4()), document_id="hot", owner="owner", status="new")
    same = str(uuid.uuid4())
    procs = 6
    start_at = time.time() + 3.0  # every process connected before the start
    with ProcessPoolExecutor(procs, mp_context=multiprocessing.get_context("spawn")) as pool:
        futures = [
            pool.submit(
                _process_racer,
                owner.token,
                migrated.database_url,
                same if duplicates else str(uuid.uuid4()),
                start_at,
            )
            for _ in range(procs)
        ]
        outcomes = Counter(f.result(timeout=60) for f in futures)
    loser = "replayed" if duplicates else "OwnershipMismatch"
    assert outcomes == {"accepted": 1, loser: procs - 1}
    assert _facts(admin, tenant) == (2, 2, 2, 2)


OWNERS = ("a", "b", "c")


@pytest.mark.slow
def test_random_workload_with_crossing_handoffs_keeps_every_invariant(
    connect: ClientFactory, service: ServiceFactory, admin: psycopg.Connection[Any], tenant: str
) -> None:
    creds = {name: service(name, can_create=True) for name in OWNERS}
    workers = 8
    clients = [{name: connect(cred) for name, cred in creds.items()} for _ in range(workers)]
    docs = [f"doc-{i}" for i in range(10)]
    for i, doc in enumerate(docs):
        owner = OWNERS[i % 2]  # a and b hold them all at first: handoffs cross between them
        clients[0][owner].create(
            event_id=str(uuid.uuid4()), document_id=doc, owner=owner, status="s"
        )

    unexpected: list[BaseException] = []
    accepted: list[Receipt] = []
    lock = threading.Lock()

    def work(seed: int) -> None:
        rng = random.Random(seed)
        mine = clients[seed]
        with psycopg.connect(admin.info.dsn, password=admin.info.password, autocommit=True) as look:
            for _ in range(120):
                doc = rng.choice(docs)
                owner, version = owner_and_version(look, tenant, doc)
                if owner is None:
                    continue
                target = rng.choice([*OWNERS, None] if rng.random() < 0.05 else OWNERS)
                # Deadlines in a few hours around now: the deadline counters
                # (two rows per handoff, locked by a trigger) cross as well.
                due = datetime.now(UTC) + timedelta(hours=rng.randint(-3, 3))
                try:
                    receipt = mine[owner].emit(
                        event_id=str(uuid.uuid4()),
                        event_type="move",
                        document_id=doc,
                        next_owner=target,
                        status="done" if target is None else "work",
                        expected_version=version,
                        due_at=None if rng.random() < 0.2 else due,
                    )
                    with lock:
                        accepted.append(receipt)
                except (errors.VersionMismatch, errors.OwnershipMismatch):
                    pass  # lost a race: the contract working
                except BaseException as exc:
                    with lock:
                        unexpected.append(exc)

    threads = [threading.Thread(target=work, args=(seed,)) for seed in range(workers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert not any(t.is_alive() for t in threads), "workload hung (deadlock?)"
    assert not unexpected, unexpected[:3]
    assert len(accepted) > 100

    # counts: for every owner, the shards sum to the active states it holds
    active = dict(
        admin.execute(
            "SELECT owner, count(*) FROM handoff.document_state WHERE tenant_id = %s "
            "AND owner IS NOT NULL GROUP BY owner",
            (tenant,),
        ).fetchall()
    )
    assert counts(admin, tenant) == active
    counters, scanned = due_counts_both(admin, tenant)
    assert counters == scanned
    # versions are gapless, match history, and each has exactly one outbox row
    rows = admin.execute(
        """
        SELECT s.document_id, s.version,
               array_agg(h.version ORDER BY h.version),
               (SELECT array_agg(o.version ORDER BY o.version) FROM handoff.outbox o
                 WHERE o.tenant_id = s.tenant_id AND o.document_id = s.document_id)
          FROM handoff.document_state s
          JOIN handoff.document_history h USING (tenant_id, document_id, run_id)
         WHERE s.tenant_id = %s
         GROUP BY s.tenant_id, s.document_id, s.version
        """,
        (tenant,),
    ).fetchall()
    assert len(rows) == len(docs)
    for doc, version, history, outbox in rows:
        assert history == list(range(1, version + 1)), doc
        assert outbox == history, doc
    assert sum(version for _, version, _, _ in rows) == len(docs) + len(accepted)


def test_crossing_handoffs_at_the_same_moment_never_deadlock(
    connect: ClientFactory, service: ServiceFactory, admin: psycopg.Connection[Any], tenant: str
) -> None:
    a, b = service("a", can_create=True), service("b", can_create=True)
    clients = {"a": connect(a), "b": connect(b)}
    clients["a"].create(event_id=str(uuid.uuid4()), document_id="x", owner="a", status="s")
    clients["b"].create(event_id=str(uuid.uuid4()), document_id="y", owner="b", status="s")
    state = {"x": ["a", 1], "y": ["b", 1]}
    barrier = threading.Barrier(2)
    due = datetime.now(UTC) + timedelta(minutes=30)  # one deadline hour: the same counter rows
    deadlocks_before = deadlocks(admin)
    failures: list[BaseException] = []

    def move(doc: str) -> None:
        owner, version = state[doc]
        target = "b" if owner == "a" else "a"
        barrier.wait()
        try:
            clients[owner].emit(
                event_id=str(uuid.uuid4()),
                event_type="cross",
                document_id=doc,
                next_owner=target,
                status="s",
                expected_version=version,
                due_at=due,
            )
        except BaseException as exc:
            failures.append(exc)
        state[doc] = [target, version + 1]

    rounds = 60
    for _ in range(rounds):  # x: a->b while y: b->a, then back
        threads = [threading.Thread(target=move, args=(doc,)) for doc in ("x", "y")]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=30)
        assert not any(t.is_alive() for t in threads), "crossing handoffs hung"
    assert not failures, failures[:3]
    versions = admin.execute(
        "SELECT document_id, version FROM handoff.document_state WHERE tenant_id = %s "
        "ORDER BY document_id",
        (tenant,),
    ).fetchall()
    assert versions == [("x", rounds + 1), ("y", rounds + 1)]
    assert counts(admin, tenant) == {"a": 1, "b": 1}
    counters, scanned = due_counts_both(admin, tenant)
    assert counters == scanned
    # Retries would hide a deadlock from the clients; the server's count does not.
    assert deadlocks(admin) == deadlocks_before


def _shards(admin: psycopg.Connection[Any], tenant: str) -> dict[int, int]:
    rows = admin.execute(
        "SELECT shard, assigned FROM handoff.owner_counts WHERE tenant_id = %s AND owner = 'x'",
        (tenant,),
    ).fetchall()
    return {int(shard): int(n) for shard, n in rows}


def test_a_count_goes_to_a_free_shard_instead_of_waiting(
    migrated: Any, admin: psycopg.Connection[Any], tenant: str
) -> None:
    """A long transaction (a consumer's unit) holding its shard's row does not make another
    count of the same owner wait: that one takes the next free shard. Only with every shard
    taken does it wait, on its own."""
    # +1: a first assignment to x; -1: x's assignment completed.
    gain = "SELECT handoff._counts(%s, NULL, 'x', 3::smallint)"
    loss = "SELECT handoff._counts(%s, 'x', NULL, 3::smallint)"
    with (
        psycopg.connect(migrated.database_url) as unit,
        psycopg.connect(migrated.database_url) as emit,
    ):
        unit.execute(gain, (tenant,))  # uncommitted: shard 3's lock and row are held
        # SET LOCAL: on Citus it reaches the worker that holds the row (the stack's
        # citus.propagate_set_commands), where a wait for it happens.
        emit.execute("SET LOCAL lock_timeout = '2s'")
        emit.execute(gain, (tenant,))  # would wait for the unit's commit on shard 3
        emit.execute(gain, (tenant,))  # the same transaction keeps its shard
        emit.commit()
        assert _shards(admin, tenant) == {4: 2}
        unit.commit()
        assert _shards(admin, tenant) == {3: 1, 4: 2}

        key = f"{tenant}/x"
        for shard in range(16):  # every shard's lock taken by one transaction
            unit.execute("SELECT pg_advisory_xact_lock(hashtextextended(%s, %s))",
                         (key, 1000 + shard))  # fmt: skip
        unit.execute(gain, (tenant,))  # and shard 3's row (its re-entrant lock)
        emit.execute("SET LOCAL lock_timeout = '300ms'")
        with pytest.raises(psycopg.errors.LockNotAvailable):
            emit.execute(loss, (tenant,))  # waits on its own shard's row
        emit.rollback()
        unit.commit()
    assert _shards(admin, tenant) == {3: 2, 4: 2}


def test_a_handoff_moves_its_count_between_two_owners_in_one_call(
    migrated: Any, admin: psycopg.Connection[Any], tenant: str
) -> None:
    """_counts takes one from the sender and gives one to the next owner (either order of
    names), writes nothing for progress, and says how many count rows it wrote."""
    counts = "SELECT handoff._counts(%s, %s, %s, 5::smallint)"
    with psycopg.connect(migrated.database_url) as conn:
        written = [
            conn.execute(counts, (tenant, sender, receiver)).fetchone()[0]  # type: ignore[index]
            for sender, receiver in [(None, "b"), ("b", "a"), ("a", "c"), ("c", "c"), ("c", None)]
        ]
        conn.commit()
    assert written == [1, 2, 2, 0, 1]
    rows = admin.execute(
        "SELECT owner, sum(assigned) FROM handoff.owner_counts WHERE tenant_id = %s"
        " GROUP BY owner ORDER BY owner",
        (tenant,),
    ).fetchall()
    assert rows == [("a", 0), ("b", 0), ("c", 0)]
