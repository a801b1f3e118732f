"""Flow over time: changes of owner per minute, the edges the stage order is
learned from, minute samples of each owner's waiting work, and the folds
that keep them (run by the tracker, not by emits).
"""

from handoff.migrations.helpers import sql_steps

revision = "0007_flow"
down_revision = "0006_completed"

upgrade, downgrade = sql_steps(__file__)
