"""The three calls of the emit contract as keyword methods, for any way of sending them.

``HandoffClient`` sends them over HTTP or a connection of its own and raises
on a refusal; ``HandoffTx`` sends them in the caller's transaction and
answers a ``Rejection``. The requests are built and validated here, once.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Generic, TypeVar

from handoff.core.emitter import Request
from handoff.core.models import CreateRequest, HandoffRequest, StartRunRequest, validated

R = TypeVar("R")


class Calls(Generic[R]):
    """``create``, ``emit`` and ``start_run``; subclasses say how a request is sent."""

    def _send(self, request: Request, document_id: str | None = None) -> R:
        raise NotImplementedError

    def create(
        self,
        *,
        event_id: str,
        document_id: str,
        owner: str,
        status: str,
        due_at: datetime | None = None,
        data: dict[str, Any] | None = None,
        event_type: str = "created",
        correlation_id: str | None = None,
        causation_id: str | None = None,
    ) -> R:
        """Initial assignment: version 1 of run 1, owned by ``owner``."""
        request = validated(
            CreateRequest,
            event_id=event_id,
            document_id=document_id,
            owner=owner,
            status=status,
            due_at=due_at,
            data=data,
            event_type=event_type,
            correlation_id=correlation_id,
            causation_id=causation_id,
        )
        return self._send(request)

    def emit(
        self,
        *,
        event_id: str,
        event_type: str,
        document_id: str,
        next_owner: str | None,
        status: str,
        expected_version: int,
        sender: str | None = None,
        due_at: datetime | None = None,
        data: dict[str, Any] | None = None,
        run_id: int | None = None,
        correlation_id: str | None = None,
        causation_id: str | None = None,
    ) -> R:
        """Handoff (``next_owner`` differs), progress (same) or completion (``None``)."""
        request = validated(
            HandoffRequest,
            event_id=event_id,
            event_type=event_type,
            document_id=document_id,
            next_owner=next_owner,
            status=status,
            expected_version=expected_version,
            sender=sender,
            due_at=due_at,
            data=data,
            run_id=run_id,
            correlation_id=correlation_id,
            causation_id=causation_id,
        )
        return self._send(request)

    def start_run(
        self,
        *,
        event_id: str,
        document_id: str,
        owner: str,
        status: str,
        due_at: datetime | None = None,
        data: dict[str, Any] | None = None,
        event_type: str = "run-started",
    ) -> R:
        """Reprocess a finished document: a new run whose versions start again at 1."""
        request = validated(
            StartRunRequest,
            event_id=event_id,
            owner=owner,
            status=status,
            due_at=due_at,
            data=data,
            event_type=event_type,
        )
        return self._send(request, document_id)
