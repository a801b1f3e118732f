"""The rehearsal's payments consumer as a process app (``handoff consume`` /
``handoff effects run tests.effect_apps:app``): credential from
HANDOFF_CONSUMER_CREDENTIAL, provider from HANDOFF_SANDBOX_URL."""

from __future__ import annotations

import os

from handoff.consumers.providers import SandboxPayments
from handoff.rehearsal.orders import payments_app

app = payments_app(None, lambda: SandboxPayments(os.environ["HANDOFF_SANDBOX_URL"], timeout_s=2.0))
