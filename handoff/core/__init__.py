"""The contract: settings, errors, models, database access, the emit call, the unit of
work, the client.

Imports nothing else of Handoff's.
"""

from handoff.core import errors
from handoff.core.client import HandoffClient
from handoff.core.errors import HandoffError
from handoff.core.identity import Credential
from handoff.core.models import CreateRequest, HandoffRequest, Receipt, Rejection, StartRunRequest
from handoff.core.retry import RetryPolicy, retrying
from handoff.core.settings import HandoffSettings, load_settings
from handoff.core.tx import HandoffTx, handoff_tx, transact

__all__ = [
    "CreateRequest",
    "Credential",
    "HandoffClient",
    "HandoffError",
    "HandoffRequest",
    "HandoffSettings",
    "HandoffTx",
    "Receipt",
    "Rejection",
    "RetryPolicy",
    "StartRunRequest",
    "errors",
    "handoff_tx",
    "load_settings",
    "retrying",
    "transact",
]
