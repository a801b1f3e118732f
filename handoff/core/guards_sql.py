"""Named statements of the consumer family: guard, positions, parked and quarantined events.

Consumers run them as their own service role; the functions
(handoff/sql/consumers.sql) take the consumer's name and tenant from the session.
"""

from __future__ import annotations

WHOAMI = "SELECT tenant_id, name FROM handoff.consumer_whoami()"

# Guard and ordering for a batch, one round trip: one (verdict, detail) per event.
VERDICTS = """
SELECT verdict, detail
  FROM handoff.consumer_begin(%(events)s, %(types)s, %(owner)s, %(reconcile)s)
"""

# The same for one event, raising SQLSTATE P0H00 (EventNotClaimed) unless it is
# to be applied now: sent with the handler's writes and the COMMIT (consumer_claim).
CLAIM = "SELECT handoff.consumer_claim(%(events)s, %(types)s, %(owner)s)"
# A unit of one event claims it with scalar arguments (claim_one.sql says why).
CLAIM_ONE = """
SELECT handoff.consumer_claim_one(%(event_id)s, %(fingerprint)s, %(document_id)s, %(run_id)s,
                                  %(version)s, %(types)s, %(owner)s)
"""

# The same, naming the consumer's tenant: on Citus each is one call handed to the
# tenant's worker, inside the unit too (handoff/sql/by_tenant.sql).
VERDICTS_FOR = """
SELECT verdict, detail
  FROM handoff.consumer_begin_for(%(tenant)s, %(events)s, %(types)s, %(owner)s, %(reconcile)s)
"""
CLAIM_FOR = "SELECT handoff.consumer_claim_for(%(tenant)s, %(events)s, %(types)s, %(owner)s)"
CLAIM_ONE_FOR = """
SELECT handoff.consumer_claim_one_for(%(tenant)s, %(event_id)s, %(fingerprint)s,
                                      %(document_id)s, %(run_id)s, %(version)s, %(types)s,
                                      %(owner)s)
"""

HOLD = """
SELECT handoff.consumer_hold(%(reason)s, %(event)s, %(key)s, %(value)s, %(headers)s,
                             %(category)s, %(error)s, %(attempts)s, %(handler)s,
                             %(handler_version)s, %(wait_s)s)
"""

DUE = """
SELECT kind, id, topic, kafka_partition, kafka_offset, message_key, message_value, headers,
       expired
  FROM handoff.consumer_due(%(limit)s)
"""

HOLD_FOR = """
SELECT handoff.consumer_hold_for(%(tenant)s, %(reason)s, %(event)s, %(key)s, %(value)s,
                                 %(headers)s, %(category)s, %(error)s, %(attempts)s,
                                 %(handler)s, %(handler_version)s, %(wait_s)s)
"""

TAKE = "SELECT handoff.consumer_take(%(kind)s, %(id)s)"
TAKE_FOR = "SELECT handoff.consumer_take_for(%(tenant)s, %(kind)s, %(id)s)"

PENDING = "SELECT quarantined, parked, oldest_s FROM handoff.consumer_pending()"

# Marks deliveries about to be processed; answers the most any of them has had.
RECEIVE = "SELECT handoff.consumer_receive(%(kind)s, %(marks)s)"
