"""${message}
"""

from handoff.migrations.helpers import sql_steps

revision = ${repr(up_revision)}
down_revision = ${repr(down_revision)}

# The change is the SQL file beside this one (same name, .sql), what undoes it
# the .down.sql. A change to a function edits its family in handoff/sql and
# ends with its file (helpers.apply_family; family_sql gives the text).
upgrade, downgrade = sql_steps(__file__)
