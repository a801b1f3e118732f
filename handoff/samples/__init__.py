"""The sample invoice pipeline that ``handoff demo`` runs (and users copy from):
intake -> routing -> review -> finalization (pays through the effect ledger) -> paid."""
