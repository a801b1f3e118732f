"""Workflow starts: "the data model is the trigger" [DynamoDB Stream -> Pipe filter ->
SQS + DLQ -> Lambda batch 1 -> Step Functions StartExecution].

A starter is a consumer with a content filter (for example ``created``
events with status ``pending``) and batch size 1, whose handler starts a
workflow run in the guard's transaction under a deterministic name. A
redelivery is stopped by the guard; a second start under the same name,
from anywhere, finds the first run (``handoff.workflow_start``); an update
of the document (any version after the first) does not pass the filter.

    starter = Consumer("intake", credential)
    start_workflow_on(starter, "created", workflow="invoice", where={"status": "pending"},
                      then=lambda event, run, tx: tx.emit(...))   # optional first step
"""

from __future__ import annotations

import hashlib
import re
import unicodedata
from collections.abc import Callable
from typing import Any

from handoff.consumers.app import Consumer, Handler
from handoff.consumers.event import Event
from handoff.core.effects import WorkflowRun
from handoff.core.tx import HandoffTx

NAME_MAX = 80  # Step Functions' limit on execution names
NAME = re.compile(r"^[A-Za-z0-9_.-]{1,80}$")
_NOT_ALLOWED = re.compile(r"[^A-Za-z0-9_.-]+")
_SUFFIX = 16  # hex characters of the hash: 64 bits


def execution_name(document_id: str, event_id: str) -> str:
    """A valid, deterministic execution name for (document, event), for any id.

    A readable prefix (the document id folded to ASCII, other characters as
    ``-``) and 64 bits of a hash of both ids, so two documents whose ids fold
    to the same prefix (unicode, or ids longer than the limit) still get two
    names, and the same pair always the same one. The suffix is what makes it
    unique; the prefix is for people reading the run list and traces.
    """
    folded = unicodedata.normalize("NFKD", document_id).encode("ascii", "ignore").decode()
    prefix = _NOT_ALLOWED.sub("-", folded).strip("-.")[: NAME_MAX - _SUFFIX - 1] or "doc"
    digest = hashlib.sha256(f"{document_id}\x1f{event_id}".encode()).hexdigest()[:_SUFFIX]
    return f"{prefix}-{digest}"


ThenFn = Callable[[Event, WorkflowRun, HandoffTx], Any]


def start_workflow_on(
    app: Consumer,
    event_type: str,
    *,
    workflow: str,
    where: dict[str, Any] | None = None,
    input: Callable[[Event], dict[str, Any]] | None = None,
    then: ThenFn | None = None,
) -> Handler:
    """Make ``app`` start a run of ``workflow`` for each new document run whose first
    event is of ``event_type`` and matches ``where``.

    Sets the app's batch size to 1 [Lambda batch size 1]: a start is not
    batched with others, so a failure redelivers one event, not ten.
    ``then(event, run, tx)`` runs only when this call started the run.
    """
    app.batch_size = 1
    # Only the first version of a run is the trigger [the Pipe filter's
    # eventName = INSERT]: a later version is an update of a document whose
    # run already started, whatever its event type and status say.
    where = {**(where or {}), "version": 1}

    def start(event: Event, tx: HandoffTx) -> None:
        run = tx.start_workflow(
            workflow=workflow,
            execution_name=execution_name(event.document_id, event.event_id),
            document_id=event.document_id,
            run_id=event.run_id,
            event_id=event.event_id,
            input=input(event) if input else {"documentId": event.document_id, **event.data},
        )
        if run.created and then is not None:
            then(event, run, tx)

    return app.add_handler(event_type, start, name=f"start:{workflow}", where=where)
