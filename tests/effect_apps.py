"""The rehearsal's payments consumer as a process app (``handoff consume`` /
``handoff effects run tests.effect_apps:app``): credential from
HANDOFF_CONSUMER_CREDENTIAL, provider from HANDOFF_SANDBOX_URL.

``TEST_EFFECTS_HANG_AFTER_SUBMIT``: stop dead at the after-submit injection
point (the provider answered, the answer not yet recorded), so that a
kill -9 leaves a claimed, submitted intent."""

from __future__ import annotations

import logging
import os
import time

from handoff.consumers.providers import SandboxPayments
from handoff.rehearsal.orders import payments_app

app = payments_app(None, lambda: SandboxPayments(os.environ["HANDOFF_SANDBOX_URL"], timeout_s=2.0))

if os.environ.get("TEST_EFFECTS_HANG_AFTER_SUBMIT"):

    @app.after_submit
    def hang(intent_id: int) -> None:
        logging.getLogger("tests").warning("hanging after submitting intent %d", intent_id)
        while True:
            time.sleep(3600)
