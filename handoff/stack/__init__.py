"""Composition: the ``handoff`` CLI, the local stack without Docker, the demo."""
