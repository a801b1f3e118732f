DROP POLICY IF EXISTS tenant_reader ON handoff.quarantine;
DROP POLICY IF EXISTS tenant_reader ON handoff.effect_intents;
ALTER TABLE handoff.quarantine DISABLE ROW LEVEL SECURITY;
ALTER TABLE handoff.effect_intents DISABLE ROW LEVEL SECURITY;
REVOKE SELECT ON handoff.quarantine, handoff.effect_intents FROM handoff_reader;
DROP FUNCTION IF EXISTS handoff.fold_flow, handoff.sample_owners, handoff.owner_waiting,
              handoff.relay_backlog, handoff.reader_services;
DROP TABLE handoff.flow_minutes, handoff.flow_edges, handoff.owner_samples,
           handoff.flow_fold, handoff.flow_gaps;
