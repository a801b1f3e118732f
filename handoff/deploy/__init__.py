"""Deployments: the file that says which processes run, and the supervisor of ``handoff run``."""
