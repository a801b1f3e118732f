"""On Citus: the relay's wake-up on every worker, not only on its own session's node.

An emit asks its node's ``relay_wakeup`` flag whether a relay waits, and if
so notifies on that node (0001_contract). On Citus an emit runs on the
worker of its tenant, so its NOTIFY is heard only there: the relay keeps
one listening session per worker (core/worker_listen.py), raises each
worker's flag when it goes idle, and waits on all its sessions at once.
"""

from __future__ import annotations

from handoff.core import outbox_sql as q
from handoff.core.worker_listen import WorkerListeners


class WorkerWakeups(WorkerListeners):
    def __init__(self, database_url: str) -> None:
        super().__init__(database_url, q.LISTEN, "wake-ups")

    def arm(self) -> None:
        """Each worker's flag up: its next emit notifies."""
        self.each(q.SET_WAITING)
