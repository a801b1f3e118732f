"""librdkafka's log lines during a broker outage, folded into one outage (core/outage.py).

While a broker is away librdkafka logs each failed connect, request time-out
and disconnect, per broker and per client thread, at ERROR (a 20 s outage
was about 440 lines per consumer). Handed a logger from ``client_logger``,
those lines go to an ``Outage`` instead: one WARNING when it begins, a
reminder every few minutes, one line when the client says it is back.
Every other librdkafka line passes through unchanged.
"""

from __future__ import annotations

import logging
import re

from confluent_kafka import KafkaError

from handoff.core.outage import Outage

# What librdkafka says about a broker it cannot reach (its FAIL, ERROR, REQTMOUT and
# BROKERFAIL facilities), whatever the client.
UNREACHABLE = re.compile(
    r"Connect to .* failed|Disconnected|brokers are down|Connection refused|timed out"
    r"|Receive failed|Send failed|Failed to resolve|Timed out|REQTMOUT|BROKERFAIL"
)
# The errors the error callback and messages carry for the same condition.
TRANSPORT = frozenset({KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN,
                       KafkaError._TIMED_OUT, KafkaError._RESOLVE,
                       KafkaError._MSG_TIMED_OUT})  # fmt: skip


class _FoldOutage(logging.Filter):
    def __init__(self, outage: Outage) -> None:
        super().__init__()
        self.outage = outage

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno >= logging.WARNING:
            text = record.getMessage()
            if UNREACHABLE.search(text):
                self.outage.failed(text)
                return False
        return True


def client_logger(name: str, outage: Outage) -> logging.Logger:
    """A logger for a librdkafka client's ``logger`` setting, whose outage lines go to
    ``outage``; one per name (the filter is added once)."""
    logger = logging.getLogger(name)
    if not any(isinstance(f, _FoldOutage) for f in logger.filters):
        logger.addFilter(_FoldOutage(outage))
    return logger


def is_outage(error: KafkaError) -> bool:
    """Whether an error of a message or the error callback means: a broker is away."""
    return error.code() in TRANSPORT
