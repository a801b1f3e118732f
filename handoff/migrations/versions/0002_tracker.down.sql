DROP TRIGGER document_state_due_insert ON handoff.document_state;
DROP TRIGGER document_state_due_update ON handoff.document_state;
DROP FUNCTION handoff._due_count_trigger, handoff._due_bucket,
              handoff.fold_due_counts, handoff.reader_session;
DROP TABLE handoff.owner_due_counts;
DROP POLICY tenant_reader ON handoff.document_state;
DROP POLICY tenant_reader ON handoff.document_history;
DROP POLICY tenant_reader ON handoff.owner_counts;
DROP POLICY tenant_reader ON handoff.rejections;
ALTER TABLE handoff.document_state DISABLE ROW LEVEL SECURITY;
ALTER TABLE handoff.document_history DISABLE ROW LEVEL SECURITY;
ALTER TABLE handoff.owner_counts DISABLE ROW LEVEL SECURITY;
ALTER TABLE handoff.rejections DISABLE ROW LEVEL SECURITY;
REVOKE ALL ON ALL TABLES IN SCHEMA handoff FROM handoff_reader;
REVOKE USAGE ON SCHEMA handoff FROM handoff_reader;
DROP INDEX handoff.rejections_by_tenant;
