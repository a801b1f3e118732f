"""The contract: settings, errors, database access. Imports nothing of ours."""

from handoff.core.errors import HandoffError
from handoff.core.settings import HandoffSettings, load_settings

__all__ = ["HandoffError", "HandoffSettings", "load_settings"]
