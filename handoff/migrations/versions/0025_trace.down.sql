DROP FUNCTION handoff.effect_traces(bigint[]);
ALTER TABLE handoff.effect_intents DROP COLUMN traceparent;
ALTER TABLE handoff.outbox DROP COLUMN traceparent;
ALTER TABLE handoff.document_history DROP COLUMN traceparent;
