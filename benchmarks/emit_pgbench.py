"""The emit function driven by pgbench's C client: database cost without Python's.

Each pgbench client owns one document and hands it on with every
transaction; the receipt's version comes back through ``\\gset`` as the
next ``expected_version``. The credential is looked up in the same
statement, as the HTTP API's single statement checks it.
"""

from __future__ import annotations

import uuid

import psycopg

from benchmarks.emit import OWNERS
from benchmarks.pgbench import PgbenchResult, run_text
from handoff.core.emitter import emit_as
from handoff.core.identity import Credential
from handoff.core.models import CreateRequest

NEXT = {
    "uniform": f"\\set next (:oi + random(1, {OWNERS - 1})) % {OWNERS}",
    # into the hot owner (o00), and out of it again
    "hot": f"\\set next case when :oi = 0 then random(1, {OWNERS - 1}) else 0 end",
}

SCRIPT = """{next}
SELECT (r->'receipt'->>'version')::int AS version, :next AS oi
  FROM handoff.services s
 CROSS JOIN LATERAL handoff.emit_http(
        s.db_role, s.secret_hash, 'handoff', gen_random_uuid()::text, 'handoff',
        :prefix || :client_id, NULL, NULL, 'o' || lpad(:next::text, 2, '0'), 'working',
        :version, {due}, NULL, NULL, NULL) AS r
 WHERE s.tenant_id = :tenant AND s.name = 'o' || lpad(:oi::text, 2, '0')
\\gset
"""


def run(
    database_url: str, tenant: str, tokens: dict[str, str], mix: str, clients: int, seconds: int
) -> PgbenchResult:
    prefix = f"pg-{uuid.uuid4().hex[:6]}-"
    first = Credential.parse(tokens["o01"])
    with psycopg.connect(database_url, autocommit=True) as conn:
        for client_id in range(clients):
            emit_as(
                conn,
                first,
                CreateRequest(
                    event_id=str(uuid.uuid4()),
                    document_id=f"{prefix}{client_id}",
                    owner="o01",
                    status="new",
                ),
            )
    # "-due" mixes give every handoff a deadline an hour out: all writers
    # then share one deadline hour, the worst case for its counter rows.
    base, _, due = mix.partition("-")
    deadline = "now() + interval '1 hour'" if due else "NULL"
    return run_text(database_url, SCRIPT.format(next=NEXT[base], due=deadline), clients, seconds,
                    {"tenant": tenant, "prefix": prefix, "version": 1, "oi": 1})  # fmt: skip
