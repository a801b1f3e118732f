"""Handoff: explicit, reliable service ownership of work.

Subpackages follow the layout of DESIGN.md: ``core`` (the contract),
``relay`` (outbox to Kafka), ``consumers``, ``tracker`` (HTTP and UI) and
``stack`` (CLI and the local stack). Only ``stack`` may import all others.
"""

__version__ = "0.1.0"
