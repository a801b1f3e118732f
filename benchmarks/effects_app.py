"""The effects benchmark's consumer: one effect, paid against the sandbox provider,
nothing after the answer (the ledger and the provider alone are measured)."""

from __future__ import annotations

import os

from handoff.consumers.app import Consumer
from handoff.consumers.providers import SandboxPayments

app = Consumer("bench-pay")
app.effect("pay", provider=lambda: SandboxPayments(os.environ["HANDOFF_SANDBOX_URL"]))
