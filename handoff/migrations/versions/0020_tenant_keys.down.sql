ALTER TABLE handoff.quarantine_audit DROP COLUMN tenant_id;
ALTER TABLE handoff.effect_history DROP COLUMN tenant_id;
