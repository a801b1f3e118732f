-- The audit rows of a quarantine entry and of an effect intent name their tenant.
ALTER TABLE handoff.quarantine_audit ADD COLUMN tenant_id text;
UPDATE handoff.quarantine_audit a SET tenant_id = q.tenant_id
  FROM handoff.quarantine q WHERE q.id = a.quarantine_id;
ALTER TABLE handoff.quarantine_audit ALTER COLUMN tenant_id SET NOT NULL;

ALTER TABLE handoff.effect_history ADD COLUMN tenant_id text;
UPDATE handoff.effect_history h SET tenant_id = e.tenant_id
  FROM handoff.effect_intents e WHERE e.id = h.intent_id;
ALTER TABLE handoff.effect_history ALTER COLUMN tenant_id SET NOT NULL;
