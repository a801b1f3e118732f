"""The sandbox provider's own durable records.

A file of its own (SQLite, from the standard library), deliberately not
Handoff's PostgreSQL: the provider stands for a third party, and a rehearsal
that restarts Handoff's database must leave the provider's records as they
were, as a real provider's would be. Writes are serialised by one lock, so
"look up the key, else insert" is atomic; fsync on every commit
(synchronous=FULL), so an accepted payment survives a crash of the provider.
"""

from __future__ import annotations

import hashlib
import sqlite3
import threading
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson

SCHEMA = """
CREATE TABLE IF NOT EXISTS payments (
    id              TEXT PRIMARY KEY,
    idempotency_key TEXT NOT NULL UNIQUE,
    fingerprint     TEXT NOT NULL,
    reference       TEXT NOT NULL,
    amount          INTEGER NOT NULL,
    currency        TEXT NOT NULL,
    status          TEXT NOT NULL,
    http_status     INTEGER NOT NULL,
    request         TEXT NOT NULL,
    created_at      TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS payments_by_reference ON payments (reference, created_at);
"""


def fingerprint(request: dict[str, Any]) -> str:
    return hashlib.sha256(orjson.dumps(request, option=orjson.OPT_SORT_KEYS)).hexdigest()


@dataclass(frozen=True)
class Payment:
    id: str
    idempotency_key: str
    fingerprint: str
    reference: str
    amount: int
    currency: str
    status: str  # succeeded | failed
    http_status: int
    request: dict[str, Any]
    created_at: str

    def body(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "idempotencyKey": self.idempotency_key,
            "status": self.status,
            "amount": self.amount,
            "currency": self.currency,
            "reference": self.reference,
            "createdAt": self.created_at,
        }


def _payment(row: tuple[Any, ...]) -> Payment:
    pid, key, fp, reference, amount, currency, status, http_status, request, created_at = row
    return Payment(
        pid,
        key,
        fp,
        reference,
        amount,
        currency,
        status,
        http_status,
        orjson.loads(request),
        created_at,
    )


COLUMNS = (
    "id, idempotency_key, fingerprint, reference, amount, currency, status, http_status, "
    "request, created_at"
)


class Store:
    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._db = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=FULL")
        self._db.executescript(SCHEMA)

    def by_key(self, key: str) -> Payment | None:
        with self._lock:
            row = self._db.execute(
                f"SELECT {COLUMNS} FROM payments WHERE idempotency_key = ?", (key,)
            ).fetchone()
        return _payment(row) if row else None

    def create(self, key: str, request: dict[str, Any], *, declined: bool) -> tuple[Payment, bool]:
        """The payment for ``key``: the existing one (False) or a new one (True)."""
        with self._lock:
            row = self._db.execute(
                f"SELECT {COLUMNS} FROM payments WHERE idempotency_key = ?", (key,)
            ).fetchone()
            if row is not None:
                return _payment(row), False
            payment = Payment(
                id="pay_" + uuid.uuid4().hex[:24],
                idempotency_key=key,
                fingerprint=fingerprint(request),
                reference=str(request["reference"]),
                amount=int(request["amount"]),
                currency=str(request["currency"]),
                status="failed" if declined else "succeeded",
                http_status=402 if declined else 201,
                request=request,
                created_at=datetime.now(UTC).isoformat(timespec="microseconds"),
            )
            self._db.execute(
                f"INSERT INTO payments ({COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    payment.id,
                    key,
                    payment.fingerprint,
                    payment.reference,
                    payment.amount,
                    payment.currency,
                    payment.status,
                    payment.http_status,
                    orjson.dumps(request).decode(),
                    payment.created_at,
                ),
            )
            return payment, True

    def list(self, reference: str | None, limit: int, after: int = 0) -> tuple[list[Payment], int]:
        """Payments in the order they were made, after position ``after``; and the position
        of the last one (SQLite's rowid: a keyset cursor for listing everything)."""
        with self._lock:
            rows = self._db.execute(
                f"SELECT rowid, {COLUMNS} FROM payments WHERE (? IS NULL OR reference = ?) "
                "AND rowid > ? ORDER BY rowid LIMIT ?",
                (reference, reference, after, limit),
            ).fetchall()
        return [_payment(row[1:]) for row in rows], (rows[-1][0] if rows else after)

    def count(self) -> int:
        with self._lock:
            return int(self._db.execute("SELECT count(*) FROM payments").fetchone()[0])

    def close(self) -> None:
        with self._lock:
            self._db.close()
