"""On Citus: LISTEN on every worker, not only on the caller's own session's node.

A function delegated to a tenant's worker (an emit, an effect intent) runs
its ``pg_notify`` there, so a notification is heard only by sessions on that
worker. A listener that must hear every tenant's (the relay, the effect
executors) keeps one session per worker the coordinator lists, beside its
own session on the coordinator, and waits on all of them at once. A worker
it cannot reach only costs latency (the listener polls anyway): it is logged
once and tried again at the next refresh, never an error.
"""

from __future__ import annotations

import logging
import select
import time
from typing import Any, LiteralString

import psycopg
from psycopg.conninfo import make_conninfo

log = logging.getLogger("handoff.citus")

# The workers as the coordinator reaches them (its own node is the caller's session).
WORKERS = """
SELECT nodename, nodeport FROM pg_dist_node
 WHERE noderole = 'primary' AND isactive AND groupid <> 0
"""

Node = tuple[str, int]


class WorkerListeners:
    def __init__(self, database_url: str, listen: LiteralString, what: str) -> None:
        self._url, self._listen, self._what = database_url, listen, what
        self._conns: dict[Node, psycopg.Connection[Any]] = {}
        self._unreachable: set[Node] = set()

    def refresh(self, conn: psycopg.Connection[Any]) -> None:
        """Listens on the workers the coordinator lists now; lets go of the others."""
        nodes = {(str(host), int(port)) for host, port in conn.execute(WORKERS).fetchall()}
        for node in set(self._conns) - nodes:
            self._drop(node)
        for node in nodes - set(self._conns):
            try:
                worker = psycopg.connect(
                    make_conninfo(self._url, host=node[0], port=node[1]),
                    autocommit=True, connect_timeout=5,
                )  # fmt: skip
                worker.execute(self._listen)
            except psycopg.Error as exc:
                if node not in self._unreachable:
                    log.warning("no %s from worker %s:%s (polling instead): %s",
                                self._what, *node, exc)  # fmt: skip
                    self._unreachable.add(node)
                continue
            self._unreachable.discard(node)
            self._conns[node] = worker

    def each(self, statement: LiteralString) -> None:
        """``statement`` on every worker's session (one that fails is let go)."""
        for node, worker in list(self._conns.items()):
            try:
                worker.execute(statement)
            except psycopg.Error:
                self._drop(node)

    def wait(self, conn: psycopg.Connection[Any], timeout: float) -> bool:
        """Until a notification on ``conn`` or any worker's session (True), or ``timeout``."""
        deadline = time.monotonic() + timeout
        while True:
            # Notifications that came with an earlier answer wait in a backlog,
            # not on the socket: take those first, without waiting.
            if heard(conn) | self._heard_on_workers():
                return True
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            sessions = [conn.fileno(), *(w.fileno() for w in self._conns.values())]
            readable, _, _ = select.select(sessions, [], [], remaining)
            if not readable:
                return False

    def close(self) -> None:
        for node in list(self._conns):
            self._drop(node)

    def _heard_on_workers(self) -> bool:
        found = False
        for node, worker in list(self._conns.items()):
            try:
                found |= heard(worker)
            except psycopg.Error:  # its node is gone or restarting: polled meanwhile
                self._drop(node)
        return found

    def _drop(self, node: Node) -> None:
        worker = self._conns.pop(node, None)
        if worker is not None:
            worker.close()


def heard(session: psycopg.Connection[Any]) -> bool:
    """Whether a notification has arrived (all that have are taken), without waiting."""
    return any(True for _ in session.notifies(timeout=0))
