"""The rehearsal's payments consumer as a process app (``handoff consume`` /
``handoff effects run tests.effect_apps:app``): credential from
HANDOFF_CONSUMER_CREDENTIAL, provider from HANDOFF_SANDBOX_URL.

``TEST_EFFECTS_HANG_AFTER_SUBMIT``: stop dead at the after-submit injection
point (the provider answered, the answer not yet recorded), so that a
kill -9 leaves a claimed, submitted intent.

``record_only``: the same "pay" effect with nothing after its answer (no
``on_outcome``), so that its executors record answers without waiting for them
(consumers/records.py ``record_later``); each submission takes
``TEST_EFFECTS_SUBMIT_S`` seconds more."""

from __future__ import annotations

import logging
import os
import time
from typing import Any

from handoff.consumers.app import Consumer
from handoff.consumers.providers import Answer, SandboxPayments
from handoff.rehearsal.orders import PAYMENTS, payments_app

app = payments_app(None, lambda: SandboxPayments(os.environ["HANDOFF_SANDBOX_URL"], timeout_s=2.0))


class SlowPayments(SandboxPayments):
    def submit(self, key: str, request: dict[str, Any]) -> Answer:
        time.sleep(float(os.environ.get("TEST_EFFECTS_SUBMIT_S", "0")))
        return super().submit(key, request)


record_only = Consumer(PAYMENTS)
record_only.effect("pay", provider=lambda: SlowPayments(os.environ["HANDOFF_SANDBOX_URL"]))

if os.environ.get("TEST_EFFECTS_HANG_AFTER_SUBMIT"):

    @app.after_submit
    def hang(intent_id: int) -> None:
        logging.getLogger("tests").warning("hanging after submitting intent %d", intent_id)
        while True:
            time.sleep(3600)
