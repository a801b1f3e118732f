"""What a Handoff process tells the tools operators already run.

``settings`` (``HANDOFF_LOG_FORMAT``) and ``logs`` (one format for every
process, JSON on request, with the work in hand on every line).
"""
