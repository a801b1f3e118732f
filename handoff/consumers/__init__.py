"""Consumers: a service reacts to the event that made it owner, exactly once in effect.

    from handoff.consumers import Consumer, Event
    from handoff.core import HandoffTx

    app = Consumer("review")          # credential from HANDOFF_CONSUMER_CREDENTIAL

    @app.handler("routed")
    def review(event: Event, tx: HandoffTx) -> None: ...

Run with ``handoff consume mymodule:app``.
"""

from handoff.consumers.app import Consumer, Effect, Handler, Outcome
from handoff.consumers.event import Event, Position

__all__ = ["Consumer", "Effect", "Event", "Handler", "Outcome", "Position"]
