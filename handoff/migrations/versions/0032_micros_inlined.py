"""handoff._micros is inlined where it is called: its body subtracts the epoch and
extracts from the interval, both immutable, instead of extracting the epoch from a
timestamptz, which is declared STABLE and kept the IMMUTABLE function from being
inlined. The outbox payload's four calls then cost an emit no SQL function calls of
their own (the why is above _micros in handoff/sql/contract.sql). Same values.

The changed line ends ``-- since 0032_micros_inlined``: the downgrade applies the
family as the revision below has it, which leaves that line out.
"""

from handoff.migrations.helpers import apply_family

revision = "0032_micros_inlined"
down_revision = "0031_outbox_xid_first"


def upgrade() -> None:
    apply_family("contract", revision)


def downgrade() -> None:
    apply_family("contract", down_revision)
