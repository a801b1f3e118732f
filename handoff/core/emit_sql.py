"""Named statements of the state/history/counts/receipts/outbox family.

The emit transaction itself is the server-side function ``handoff._emit``
(handoff/sql/contract.sql); these are the only ways in.
Explicit casts keep function resolution independent of how the driver
types a Python value (an ``int`` may travel as int2, int4 or int8).
"""

from __future__ import annotations

_ARGS = (
    "%(kind)s::text, %(event_id)s::text, %(event_type)s::text, %(document_id)s::text, "
    "%(run_id)s::integer, %(sender)s::text, %(next_owner)s::text, %(status)s::text, "
    "%(expected_version)s::integer, %(due_at)s::timestamptz, %(data)s::jsonb, "
    "%(correlation_id)s::text, %(causation_id)s::text"
)

# Direct mode: the service is the session's login role.
EMIT_DIRECT = f"SELECT handoff.emit_direct({_ARGS})"

# Direct mode, the answer not awaited: a refusal raises (SQLSTATE P0H01) at the commit.
EMIT_DIRECT_OR_RAISE = f"SELECT handoff.emit_direct_or_raise({_ARGS})"

# The same, naming the caller's tenant (handoff/sql/by_tenant.sql): on Citus the whole
# call is handed to the worker that holds the tenant. Outside a unit, clients call these;
# the API's (HTTP mode) passes the bearer credential, checked in the same statement.
EMIT_DIRECT_FOR = f"SELECT handoff.emit_direct_for(%(tenant)s::text, {_ARGS})"
EMIT_HTTP_FOR = (
    "SELECT handoff.emit_http_for(%(tenant)s::text, %(role)s::text, %(secret_hash)s::bytea, "
    f"{_ARGS})"
)

# A unit's next emit, not awaited, naming the unit's tenant (handed to its worker on Citus).
EMIT_DIRECT_OR_RAISE_FOR = f"SELECT handoff.emit_direct_or_raise_for(%(tenant)s::text, {_ARGS})"

# Learned once per credential: the tenant a client names on its calls.
OWN_TENANT = "SELECT tenant_id FROM handoff.consumer_whoami()"
CREDENTIAL_TENANT = (
    "SELECT handoff.credential_tenant(%(role)s::text, %(secret_hash)s::bytea) AS tenant_id"
)

# The trace context of the rest of the transaction (telemetry/tracing.py): the
# history, outbox and effect-intent rows it writes take it as their default
# (0025_trace). Local to the transaction; sent only when there is a sampled trace.
# On Citus a call delegated to the tenant's worker does not see the coordinator's
# setting, so its rows carry NULL (README "Tracing"). Propagating it as SET LOCAL
# (citus.propagate_set_commands) was tried and left: in a multi-statement message,
# as a unit sends, Citus 14.0.1 then wrote a delegated call's row twice.
SET_TRACE = "SELECT set_config('handoff.trace', %(traceparent)s::text, true)"
