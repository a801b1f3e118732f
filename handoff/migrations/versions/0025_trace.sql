-- A transaction that carries a trace sets handoff.trace (SET_TRACE in
-- core/emit_sql.py) before it writes; every row it writes here takes it.
-- Only a well-formed version-00 traceparent is kept: a session's own
-- setting of anything else stores NULL rather than failing its emit.
-- Why a default and not an argument of the emit functions: telemetry/tracing.py
-- (README "Tracing"). A stable default on ADD COLUMN rewrites nothing (existing rows
-- read NULL, the setting's value at this ALTER).
ALTER TABLE handoff.document_history ADD COLUMN traceparent text
    DEFAULT substring(current_setting('handoff.trace', true)
                      FROM '^00-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$');
ALTER TABLE handoff.outbox ADD COLUMN traceparent text
    DEFAULT substring(current_setting('handoff.trace', true)
                      FROM '^00-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$');
ALTER TABLE handoff.effect_intents ADD COLUMN traceparent text
    DEFAULT substring(current_setting('handoff.trace', true)
                      FROM '^00-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$');
