"""Consumer lag sampled into the database by a child process of the tracker."""

from handoff.migrations.helpers import sql_steps

revision = "0012_lag_samples"
down_revision = "0011_claim"

upgrade, downgrade = sql_steps(__file__)
