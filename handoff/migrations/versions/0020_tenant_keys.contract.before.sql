-- The contract function 0020_tenant_keys changes, as revisions 0015 to 0019 (which
-- apply the contract family) have it; 0020's downgrade puts it back.

CREATE OR REPLACE FUNCTION handoff._replay(
    p_tenant text, p_sender text, p_request jsonb, p_fingerprint bytea
) RETURNS jsonb
LANGUAGE sql
AS $$
    SELECT CASE WHEN r.fingerprint = p_fingerprint THEN
        jsonb_build_object('accepted', true, 'replayed', true, 'receipt', jsonb_build_object(
            'eventId', r.event_id, 'documentId', r.document_id, 'runId', r.run_id,
            'version', r.version, 'owner', r.owner, 'status', r.status,
            'acceptedAt', r.accepted_at))
    ELSE
        handoff._reject(p_tenant, p_sender, p_request, 'ConflictingEventReuse',
                format('event id %s was already accepted with different content '
                       '(document %s version %s); mint a new event id for a new change',
                       r.event_id, r.document_id, r.version),
                NULL, NULL)
    END
      FROM handoff.receipts r
     WHERE r.tenant_id = p_tenant AND r.event_id = p_request->>'eventId';
$$;
