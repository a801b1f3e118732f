"""A dependency's outage logged as an outage: one line when it begins, one when it ends.

A process that retries a database, broker or provider every few hundred
milliseconds would otherwise log every failed attempt (a 20 s Kafka outage
was about 440 ERROR lines per consumer). Instead:

    kafka = Outage(log, "Kafka")
    kafka.failed(exc)   # the first time: WARNING "Kafka unavailable: <why>"; then quiet,
                        # but for a reminder every ``remind_s`` while it lasts
    kafka.ok()          # after a failure: INFO "Kafka is back after 20.3 s (57 failures)"

Thread-safe: a consumer's lanes and a relay's threads share one.
"""

from __future__ import annotations

import logging
import threading
import time


class Outage:
    def __init__(
        self, log: logging.Logger, what: str, *, remind_s: float = 300.0, grace_s: float = 1.0
    ) -> None:
        self.log, self.what, self.remind_s, self.grace_s = log, what, remind_s, grace_s
        self._lock = threading.Lock()
        self._since: float | None = None
        self._reminded = 0.0
        self._failures = 0
        self._ok_at = -grace_s

    @property
    def failing(self) -> bool:
        return self._since is not None

    def failed(self, reason: object) -> None:
        now = time.monotonic()
        with self._lock:
            if self._since is None and now - self._ok_at < self.grace_s:
                # Just back: a line a client queued before it saw so is no new outage.
                return
            self._failures += 1
            if self._since is None:
                self._since = self._reminded = now
                self.log.warning("%s unavailable: %s", self.what, reason)
            elif now - self._reminded >= self.remind_s:
                self._reminded = now
                self.log.warning(
                    "%s still unavailable after %.0f s (%d failures): %s",
                    self.what, now - self._since, self._failures, reason,
                )  # fmt: skip

    def ok(self) -> None:
        if self._since is None:  # the usual case: no lock taken
            return
        with self._lock:
            if self._since is None:
                return
            self.log.warning(
                "%s is back after %.1f s (%d failures)",
                self.what, time.monotonic() - self._since, self._failures,
            )  # fmt: skip
            self._since, self._failures = None, 0
            self._ok_at = time.monotonic()
