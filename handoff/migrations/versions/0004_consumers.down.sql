-- emit_direct keeps its 0004 body: the same rules, only its service
-- lookup uses the index.
DROP FUNCTION handoff.consumer_receive, handoff.consumer_whoami,
              handoff.consumer_begin, handoff.consumer_hold, handoff.consumer_due,
              handoff.consumer_take, handoff.consumer_pending, handoff._consumer;
DROP TABLE handoff.consumer_deliveries, handoff.consumer_parked,
           handoff.quarantine_audit, handoff.quarantine, handoff.consumer_guards;
