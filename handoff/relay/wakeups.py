"""On Citus: the relay's wake-up on every worker, not only on its own session's node.

An emit asks its node's ``relay_wakeup`` flag whether a relay waits, and if
so notifies on that node (0001_contract). On Citus an emit runs on the
worker of its tenant, so its NOTIFY is heard only there: the relay keeps
one listening session per worker, raises each worker's flag when it goes
idle, and waits on all its sessions at once. A worker it cannot reach only
costs latency (the relay polls anyway), so such a worker is logged and
tried again at the next refresh; it never stops the relay.
"""

from __future__ import annotations

import logging
import select
import time
from typing import Any

import psycopg
from psycopg.conninfo import make_conninfo

from handoff.core import outbox_sql as q

log = logging.getLogger("handoff.relay")

# The workers as the coordinator reaches them (the coordinator itself is the
# relay's own session).
WORKERS = """
SELECT nodename, nodeport FROM pg_dist_node
 WHERE noderole = 'primary' AND isactive AND groupid <> 0
"""

Node = tuple[str, int]


class WorkerWakeups:
    def __init__(self, database_url: str) -> None:
        self._url = database_url
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
                worker.execute(q.LISTEN)
            except psycopg.Error as exc:
                if node not in self._unreachable:
                    log.warning("no wake-ups from worker %s:%s (polling instead): %s", *node, exc)
                    self._unreachable.add(node)
                continue
            self._unreachable.discard(node)
            self._conns[node] = worker

    def arm(self) -> None:
        """Each worker's flag up: its next emit notifies."""
        for node, worker in list(self._conns.items()):
            try:
                worker.execute(q.SET_WAITING)
            except psycopg.Error:
                self._drop(node)

    def wait(self, conn: psycopg.Connection[Any], timeout: float) -> None:
        """Until a notification on the relay's session or any worker's, or ``timeout``."""
        deadline = time.monotonic() + timeout
        while True:
            # Notifications that came with an earlier answer wait in a backlog,
            # not on the socket: take those first, without waiting.
            if _heard(conn) | self._heard_on_workers():
                return
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return
            sessions = [conn.fileno(), *(w.fileno() for w in self._conns.values())]
            readable, _, _ = select.select(sessions, [], [], remaining)
            if not readable:
                return

    def close(self) -> None:
        for node in list(self._conns):
            self._drop(node)

    def _heard_on_workers(self) -> bool:
        heard = False
        for node, worker in list(self._conns.items()):
            try:
                heard |= _heard(worker)
            except psycopg.Error:  # its node is gone or restarting: polled meanwhile
                self._drop(node)
        return heard

    def _drop(self, node: Node) -> None:
        worker = self._conns.pop(node, None)
        if worker is not None:
            worker.close()


def _heard(session: psycopg.Connection[Any]) -> bool:
    """Whether a notification has arrived (all that have are taken), without waiting."""
    return any(True for _ in session.notifies(timeout=0))
