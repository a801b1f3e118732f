"""A relay with a crash at its after-ack injection point: ``python -m tests.relay_faults``.

It is the relay ``handoff relay`` runs (the same composition root), with a hook
that kills the process with SIGKILL right after the broker acked a batch and
before the rows are marked published: the test proves they are republished.
The product has no setting that does this; only code such as this sets it.
"""

from __future__ import annotations

import os
import signal

from handoff.cli import bootstrap
from handoff.cli._process import long_running

relay = bootstrap.relay()
relay.after_ack_hooks.append(lambda _acked: os.kill(os.getpid(), signal.SIGKILL))
long_running(relay.stop)
relay.run()
