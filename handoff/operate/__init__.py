"""Operating Handoff on a bad day: the auditor, the recovery budget, retention."""
