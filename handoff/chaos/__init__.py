"""``handoff chaos``: a bounded run of the invoice pipeline on the clustered stack while
processes and nodes are killed, then proof from outside that nothing was lost or doubled.

plan (what is killed when, from a seed) · pipeline (the services and processes) ·
load (the load generator) · faults (the kills) · verdict (the checks) · run (all of it).
"""
