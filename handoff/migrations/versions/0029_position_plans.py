"""consumer_begin runs with sorts priced out (SET enable_sort = off), so that the guard's
position lookup reads the position index whatever the statistics say: on a guard table
analysed before it held anything of the consumer (a new tenant, a run after a purge),
the plan took the primary key and walked every guard row of the consumer for each event
(the why is above consumer_begin in handoff/sql/consumers.sql).

The SET line ends ``-- since 0029_position_plans``: the downgrade applies the family as
the revision below has it, which leaves that line out.
"""

from handoff.migrations.helpers import apply_family, apply_frozen

revision = "0029_position_plans"
down_revision = "0028_effect_release"


FROZEN = "0030_claim_one.before.sql"  # consumer_begin as of this day


def upgrade() -> None:
    apply_family("consumers", revision)
    apply_frozen(FROZEN, revision)


def downgrade() -> None:
    apply_family("consumers", down_revision)
    apply_frozen(FROZEN, down_revision)
