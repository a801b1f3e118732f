DROP FUNCTION handoff.emit_direct_for, handoff.emit_http_for, handoff.credential_tenant,
              handoff.lock_service_for, handoff.consumer_begin_for, handoff.consumer_claim_for,
              handoff.consumer_hold_for, handoff.consumer_take_for, handoff.effect_intend_for,
              handoff.workflow_start_for, handoff.emit_direct_or_raise_for, handoff._acts_in;
