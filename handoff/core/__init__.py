"""The contract: settings, errors, models, database access, the emit call, the client.

Imports nothing else of Handoff's.
"""

from handoff.core import errors
from handoff.core.client import HandoffClient
from handoff.core.errors import HandoffError
from handoff.core.identity import Credential
from handoff.core.models import CreateRequest, HandoffRequest, Receipt, StartRunRequest
from handoff.core.retry import retrying
from handoff.core.settings import HandoffSettings, load_settings

__all__ = [
    "CreateRequest",
    "Credential",
    "HandoffClient",
    "HandoffError",
    "HandoffRequest",
    "HandoffSettings",
    "Receipt",
    "StartRunRequest",
    "errors",
    "load_settings",
    "retrying",
]
