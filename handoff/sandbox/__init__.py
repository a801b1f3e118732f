"""The sandbox provider: a payments-like HTTP service to perform effects against.

It stands for a third party (a payment API), so it shares nothing with
Handoff: its own process, its own records, its own idempotency contract
(same key and same parameters -> the original result; same key, other
parameters -> 409), a status lookup by key, and faults injected per request.
"""
