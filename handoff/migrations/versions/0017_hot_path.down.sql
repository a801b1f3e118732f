DROP TRIGGER document_state_due_update ON handoff.document_state;
CREATE CONSTRAINT TRIGGER document_state_due_update AFTER UPDATE OF owner, due_at
    ON handoff.document_state
    DEFERRABLE INITIALLY DEFERRED
    FOR EACH ROW WHEN (OLD.owner IS DISTINCT FROM NEW.owner OR OLD.due_at IS DISTINCT FROM NEW.due_at)
    EXECUTE FUNCTION handoff._due_count_trigger();
