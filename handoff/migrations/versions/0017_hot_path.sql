-- Services send their own unawaited emits (emit_direct checks who they are).
GRANT EXECUTE ON FUNCTION handoff.emit_direct_or_raise TO handoff_service;

-- The deadline counters' update trigger fires only when a deadline is involved:
-- a handoff between owners with no deadline before or after (the common case)
-- queued a deferred trigger call that then counted nothing (0.035 ms of its
-- function alone, per handoff).
DROP TRIGGER document_state_due_update ON handoff.document_state;
CREATE CONSTRAINT TRIGGER document_state_due_update AFTER UPDATE OF owner, due_at
    ON handoff.document_state
    DEFERRABLE INITIALLY DEFERRED
    FOR EACH ROW WHEN ((OLD.owner IS DISTINCT FROM NEW.owner OR OLD.due_at IS DISTINCT FROM NEW.due_at)
                       AND (OLD.due_at IS NOT NULL OR NEW.due_at IS NOT NULL))
    EXECUTE FUNCTION handoff._due_count_trigger();
