"""The one error hierarchy of Handoff.

Adapters (psycopg, Kafka, the registry, subprocesses of the local stack)
translate their failures into these classes at their edge. HTTP status
codes are assigned only in ``tracker/``; the CLI turns them into messages.
"""

from __future__ import annotations


class HandoffError(Exception):
    """Base of every error Handoff raises on purpose."""

    @property
    def code(self) -> str:
        """Machine-readable code: the class name, as in HTTP error bodies."""
        return type(self).__name__


class ConfigurationError(HandoffError):
    """A setting is missing or wrong; the message says which and how to fix it."""


class StackError(HandoffError):
    """The local stack could not be brought up, stopped or inspected."""


class PrerequisiteMissing(StackError):
    """A tool the local stack needs (Java, Maven) is not installed."""


class DownloadFailed(StackError):
    """Fetching Kafka or registry artifacts from Maven Central failed."""


class ServiceStartFailed(StackError):
    """A part of the stack did not become healthy in time."""
