"""Handoff: explicit, reliable service ownership of work.

Subpackages follow DESIGN.md's layout, each importing only what is below it:

- ``core``: the contract (models, errors, settings, the unit of work, the SQL
  families, the emit call, identity, Avro, Kafka clients, the W3C trace context's
  format); imports nothing of ours.
- ``telemetry`` (the log format, tracing): ``core`` only; every package above
  ``stack`` and ``migrations`` may use it, as they use ``core``.
- ``relay``, ``consumers``, ``tracker``, ``stack``, ``deploy``: import ``core`` only
  (and ``telemetry``).
- ``operate`` (audit, backlog, replay, projections, retention): ``core`` and
  ``consumers``.
- ``rehearsal``, ``samples``, ``sandbox``: ``core`` and ``consumers`` (the
  rehearsal also the relay's schema registration).
- ``dynamo`` (the AWS twin): ``core``, ``relay`` and ``operate``.
- ``chaos`` (kills under load, then the proof): ``core``, ``consumers`` (to read
  the topic back), ``operate`` (the audit), ``stack`` (the nodes it kills) and
  ``deploy`` (the supervisor that runs the pipeline).
- ``cli`` (the ``handoff`` command and its composition root): all of the above;
  nothing imports it. The demo's setup there uses ``samples``.

A test in tests/unit checks these arrows on every import of the package.
"""

__version__ = "0.1.0"
