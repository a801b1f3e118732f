-- The identity column back, going on from the sequence's value.
LOCK TABLE handoff.outbox IN ACCESS EXCLUSIVE MODE;

DO $$
DECLARE
    v_last   bigint;
    v_called boolean;
BEGIN
    SELECT last_value, is_called INTO v_last, v_called FROM handoff.outbox_id_seq;
    ALTER TABLE handoff.outbox ALTER COLUMN id DROP DEFAULT;
    DROP SEQUENCE handoff.outbox_id_seq;
    ALTER TABLE handoff.outbox ALTER COLUMN id ADD GENERATED ALWAYS AS IDENTITY;
    PERFORM setval('handoff.outbox_id_seq', v_last, v_called);
END $$;
