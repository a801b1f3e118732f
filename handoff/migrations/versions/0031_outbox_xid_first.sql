-- An outbox row's id is drawn after its transaction has its xid (issue 25).
--
-- The relay's proof that no late commit is skipped (handoff/relay/cursor.py)
-- reads the last id handed out, V, then the next xid to be assigned, X, and
-- takes a fetch whose snapshot's xmin is at least X to have seen every writer
-- of an id up to V end. That holds only for writers that had their xid before
-- they drew their id. An emit does: its first write is the document's state
-- row. A transaction whose first write is an outbox row does not: the id (the
-- column's default) is drawn as the row is built, the xid at the heap insert
-- after it, and a relay that read V and X in between passed the row while its
-- writer was still open, for good (bench peer lost one row so).
--
-- The default now takes the xid first: pg_current_xact_id() assigns one to a
-- transaction that has none (for an emit it only reads it), and a CASE
-- evaluates its condition before its result. An identity column cannot have
-- such a default, so its sequence is replaced by one of the same name that
-- goes on from the same value (under the table's lock: no id is drawn
-- meanwhile).
LOCK TABLE handoff.outbox IN ACCESS EXCLUSIVE MODE;

DO $$
DECLARE
    v_last   bigint;
    v_called boolean;
BEGIN
    SELECT last_value, is_called INTO v_last, v_called FROM handoff.outbox_id_seq;
    ALTER TABLE handoff.outbox ALTER COLUMN id DROP IDENTITY;
    CREATE SEQUENCE handoff.outbox_id_seq AS bigint OWNED BY handoff.outbox.id;
    PERFORM setval('handoff.outbox_id_seq', v_last, v_called);
END $$;

ALTER TABLE handoff.outbox ALTER COLUMN id SET DEFAULT
    CASE WHEN pg_current_xact_id() IS NOT NULL THEN nextval('handoff.outbox_id_seq') END;
