"""The per-event entry points price sequential scans out (SET enable_seqscan = off), so
that a session which first plans them on an empty or just-vacuumed table keeps index
plans as the table grows (the why is above consumer_begin in handoff/sql/consumers.sql).

Each SET line ends ``-- since 0018_index_plans``: the downgrade applies the same families
as the revision below, which leaves those lines out.
"""

from handoff.migrations.helpers import apply_family, apply_frozen

revision = "0018_index_plans"
down_revision = "0017_hot_path"

FAMILIES = ("consumers", "contract", "effects")


# What 0020 changed in the families this revision applies, as this revision has it.
FROZEN = (
    "0020_tenant_keys.before.sql",
    "0020_tenant_keys.contract.before.sql",
    "0027_emit_counts.before.sql",
)


def upgrade() -> None:
    for family in FAMILIES:
        apply_family(family, revision)  # without the lines later revisions add
    for frozen in FROZEN:
        apply_frozen(frozen)


def downgrade() -> None:
    for family in FAMILIES:
        apply_family(family, down_revision)
    for frozen in FROZEN:
        apply_frozen(frozen, down_revision)
