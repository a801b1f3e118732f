"""The emit contract and the tracker's reads on DynamoDB, as the AWS design describes.

Each accepted change is one ``TransactWriteItems``: the state item updated
under the conditions owner = sender and version = expected (or created
under attribute_not_exists), the EVENT item put, the receipt put under
attribute_not_exists, and the owners' count shards adjusted; its
``ClientRequestToken`` is derived from the tenant and event id, so an SDK
retry of the same call inside DynamoDB's ten-minute window is not applied
twice. Rejections are classified from the cancellation reasons (with the
old item the failed condition returns) and recorded as items of their own.

Where DynamoDB forces a different mechanism than PostgreSQL, and how the
contract is kept anyway:

- **GSI reads are eventually consistent.** An owner's page (ByOwner) and its
  overdue page (ByOwnerDue) may miss a handoff accepted a moment ago; the
  document's own state and history are read from the table, strongly
  consistent, as the contract requires of "where is invoice-42".
- **TransactionConflict on a hot item.** Two transactions touching one count
  item conflict rather than queue (PostgreSQL waits on the row lock). Counts
  are split over SHARDS items per owner, a shard picked at random per
  transaction, and a conflicted transaction is retried with backoff, which
  is safe: the receipt's condition makes the retry idempotent.
- **100 actions and 4 MB per transaction.** One handoff writes at most five
  items (state, event, receipt, two count shards); a document's data is
  bounded by the 400 KB item limit, which the store checks before writing.
- **1 MB per query page.** Every listing pages with ``LastEvaluatedKey`` and
  returns a cursor; counts read 16 shard items per owner in 100-key batches.
- **No row locks for a new run.** Starting run n+1 puts the new state item
  under attribute_not_exists and checks, in the same transaction, that run n
  is still finished at the version read (a ConditionCheck): concurrent starts
  cannot both win.
"""

from __future__ import annotations

import hashlib
import random
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import orjson
from botocore.exceptions import ClientError

from handoff.core.emitter import Request
from handoff.core.errors import InvalidRequest, TransientConflict, Unauthenticated
from handoff.core.fingerprint import epoch, request_fingerprint
from handoff.core.identity import Credential
from handoff.core.models import CreateRequest, HandoffRequest, Receipt, Rejection
from handoff.core.retry import CONFLICTS
from handoff.dynamo import items
from handoff.dynamo import schema as k

ITEM_LIMIT = 350_000  # bytes of a state item's data; DynamoDB refuses items over 400 KB
_item, _plain, _micros = items.to_item, items.plain, items.micros


class DynamoStore:
    """One table of the AWS design, reached through a boto3 DynamoDB client."""

    def __init__(self, client: Any, table: str = "handoff") -> None:
        self.db, self.table = client, table

    # -- setting up --------------------------------------------------------------------

    def create_table(self) -> None:
        """Create the table (idempotent) and wait until it is active."""
        try:
            self.db.create_table(**k.table_definition(self.table))
        except ClientError as exc:
            if exc.response["Error"]["Code"] != "ResourceInUseException":
                raise
        self.db.get_waiter("table_exists").wait(TableName=self.table)

    def add_service(self, tenant: str, name: str, *, can_create: bool = False) -> Credential:
        """Register a service (its credential's secret is kept hashed, as in PostgreSQL)."""
        cred = Credential.new()
        self.db.transact_write_items(
            TransactItems=[
                {
                    "Put": {
                        "TableName": self.table,
                        "ConditionExpression": "attribute_not_exists(PK)",
                        "Item": _item(items.service(tenant, name, cred.role)),
                    }
                },
                {
                    "Put": {
                        "TableName": self.table,
                        "ConditionExpression": "attribute_not_exists(PK)",
                        "Item": _item(
                            items.credential(cred.role, tenant, name, can_create, cred.secret_hash)
                        ),
                    }
                },
            ]
        )
        return cred

    # -- the emit contract ---------------------------------------------------------------

    def send(
        self, credential: Credential, request: Request, document_id: str | None = None
    ) -> Receipt | Rejection:
        """Emit as the service ``credential`` names: a Receipt, or a recorded Rejection."""
        who = self._get(k.cred_pk(credential.role), "CRED")
        if who is None or bytes(who["secret_hash"]) != credential.secret_hash:
            raise Unauthenticated("unknown or revoked service credential")
        tenant, service = str(who["tenant"]), str(who["service"])
        # A TransactionConflict is retried as PostgreSQL's serialization failures are:
        # the receipt's condition makes a repeat of an applied change a replay.
        return CONFLICTS.run(
            lambda: self._emit(tenant, service, bool(who["can_create"]), request, document_id),
            retry_on=(TransientConflict,),
        )

    def _emit(
        self, tenant: str, service: str, can_create: bool, req: Request, document_id: str | None
    ) -> Receipt | Rejection:
        kind = (
            "handoff"
            if isinstance(req, HandoffRequest)
            else ("create" if isinstance(req, CreateRequest) else "run")
        )
        doc = req.document_id if isinstance(req, (HandoffRequest, CreateRequest)) else document_id
        if doc is None:
            raise InvalidRequest("a new run needs the document id")
        next_owner = req.next_owner if isinstance(req, HandoffRequest) else req.owner
        expected = req.expected_version if isinstance(req, HandoffRequest) else None
        wanted = {
            "kind": kind,
            "eventId": req.event_id,
            "eventType": req.event_type,
            "documentId": doc,
            "runId": getattr(req, "run_id", None),
            "sender": service,
            "nextOwner": next_owner,
            "status": req.status,
            "expectedVersion": expected,
            "dueAt": epoch(req.due_at) if req.due_at else None,
            "data": req.data,
            "correlationId": req.correlation_id,
            "causationId": req.causation_id,
        }
        # PostgreSQL's fingerprint of the same request: a ported receipt still matches.
        fingerprint = request_fingerprint(wanted)
        reject = _Rejecter(self, tenant, service, wanted)
        if isinstance(req, HandoffRequest) and req.sender is not None and req.sender != service:
            return reject(
                "SenderMismatch", f"sender {req.sender} is not the authenticated service {service}"
            )
        if (replayed := self._replay(tenant, req.event_id, fingerprint, reject)) is not None:
            return replayed
        if req.data is not None and len(orjson.dumps(req.data)) > ITEM_LIMIT:
            raise InvalidRequest(f"data is larger than {ITEM_LIMIT} bytes (DynamoDB items: 400 KB)")
        assigning = next_owner is not None and (kind != "handoff" or next_owner != service)
        if assigning and self._get(k.services_pk(tenant), f"SERVICE#{next_owner}") is None:
            return reject(
                "UnknownOwner",
                f"{next_owner} is not a service of tenant {tenant}; register it first",
            )
        now = datetime.now(UTC)
        if kind != "handoff" and not can_create:
            return reject("NotPermitted", f"service {service} may not create documents")
        latest = self._latest(tenant, doc)
        if kind == "create":
            before, run = None, 1
        elif kind == "run":
            if latest is None:
                return reject("DocumentNotFound", f"document {doc} does not exist")
            if latest.get("owner") is not None:
                return reject(
                    "RunInProgress",
                    f"run {latest['run_id']} of {doc} is still owned "
                    f"by {latest['owner']}; it must finish first",
                    int(latest["version"]),
                    latest["owner"],
                )
            before, run = None, int(latest["run_id"]) + 1
        else:
            assert isinstance(req, HandoffRequest)
            before = (
                latest
                if req.run_id is None
                else self._get(k.doc_pk(tenant, doc), k.state_sk(req.run_id))
            )
            if before is None:
                return reject(
                    "DocumentNotFound",
                    f"document {doc}"
                    + (f" run {req.run_id}" if req.run_id else "")
                    + " does not exist",
                )
            run = int(before["run_id"])
            if before.get("owner") != service:
                return reject.ownership(doc, before)
            if int(before["version"]) != expected:
                return reject.version(doc, before, expected)
        state = _next_state(tenant, doc, run, before, req, service, next_owner, now)
        actions = self._actions(
            tenant, state, before, latest if kind == "run" else None, req, service, fingerprint, now
        )
        token = hashlib.sha256(f"{tenant}/{req.event_id}".encode()).hexdigest()[:36]
        try:
            self.db.transact_write_items(TransactItems=actions, ClientRequestToken=token)
        except ClientError as exc:
            return self._cancelled(exc, tenant, doc, req, fingerprint, reject, kind)
        return Receipt(
            event_id=req.event_id,
            document_id=doc,
            run_id=run,
            version=state["version"],
            owner=next_owner,
            status=req.status,
            accepted_at=now,
        )

    def _actions(
        self,
        tenant: str,
        state: dict[str, Any],
        before: dict[str, Any] | None,
        finished: dict[str, Any] | None,
        req: Request,
        service: str,
        fingerprint: bytes,
        now: datetime,
    ) -> list[dict[str, Any]]:
        pk, run, version = state["PK"], state["run_id"], state["version"]
        if before is None:
            write: dict[str, Any] = {
                "Put": {
                    "TableName": self.table,
                    "Item": _item(state),
                    "ConditionExpression": "attribute_not_exists(PK)",
                    "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
                }
            }
        else:
            write = {
                "Put": {
                    "TableName": self.table,
                    "Item": _item(state),
                    "ConditionExpression": "#o = :sender AND version = :expected",
                    "ExpressionAttributeNames": {"#o": "owner"},
                    "ExpressionAttributeValues": _item(
                        {":sender": service, ":expected": before["version"]}
                    ),
                    "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
                }
            }
        event = {
            "Put": {
                "TableName": self.table,
                "ConditionExpression": "attribute_not_exists(PK)",
                "Item": _item(_event(state, before, req, service, now)),
            }
        }
        receipt = {
            "Put": {
                "TableName": self.table,
                "ConditionExpression": "attribute_not_exists(PK)",
                "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
                "Item": _item(
                    items.receipt(
                        tenant,
                        req.event_id,
                        fingerprint,
                        state["document_id"],
                        run,
                        version,
                        state.get("owner"),
                        state["status"],
                        k.stamp(now),
                    )
                ),
            }
        }
        actions = [write, event, receipt]
        if finished is not None:  # a new run: the previous one must still be finished
            actions.append(
                {
                    "ConditionCheck": {
                        "TableName": self.table,
                        "Key": _item({"PK": pk, "SK": finished["SK"]}),
                        "ConditionExpression": "attribute_not_exists(#o) AND version = :v",
                        "ExpressionAttributeNames": {"#o": "owner"},
                        "ExpressionAttributeValues": _item({":v": finished["version"]}),
                    }
                }
            )
        prev = before.get("owner") if before else None
        if prev != state.get("owner"):
            for owner, delta in ((prev, -1), (state.get("owner"), 1)):
                if owner is not None:
                    shard = random.randrange(k.SHARDS)
                    actions.append(
                        {
                            "Update": {
                                "TableName": self.table,
                                "Key": _item(
                                    {"PK": k.count_pk(tenant, owner, shard), "SK": "COUNT"}
                                ),
                                "UpdateExpression": "ADD assigned :d SET #o = :o",
                                "ExpressionAttributeNames": {"#o": "owner"},
                                "ExpressionAttributeValues": _item({":d": delta, ":o": owner}),
                            }
                        }
                    )
        return actions

    def _cancelled(
        self,
        exc: ClientError,
        tenant: str,
        doc: str,
        req: Request,
        fingerprint: bytes,
        reject: _Rejecter,
        kind: str,
    ) -> Receipt | Rejection:
        code = exc.response["Error"]["Code"]
        if code == "IdempotentParameterMismatchException":
            # The same token (tenant, event id) with other content inside DynamoDB's window.
            return reject(
                "ConflictingEventReuse",
                f"event id {req.event_id} was already used "
                "with different content; mint a new event id for a new change",
            )
        if code != "TransactionCanceledException":
            raise exc
        reasons = [r.get("Code", "None") for r in exc.response.get("CancellationReasons", [])]
        if "TransactionConflict" in reasons:
            raise TransientConflict(
                "concurrent transactions kept touching the same items; retry the change as is"
            )
        # A receipt that appeared meanwhile answers first (an identical request won).
        if (replayed := self._replay(tenant, req.event_id, fingerprint, reject)) is not None:
            return replayed
        failed = exc.response.get("CancellationReasons", [{}])[0]
        old = _plain(failed["Item"]) if failed.get("Item") else self._latest(tenant, doc)
        if kind == "create" and old is not None:
            return reject(
                "AlreadyExists",
                f"document {doc} already exists (run {old['run_id']})",
                int(old["version"]),
                old.get("owner"),
            )
        if kind == "run":
            return reject("RunInProgress", f"a run of {doc} started meanwhile; read it again")
        if old is None:
            return reject("DocumentNotFound", f"document {doc} does not exist")
        if old.get("owner") != reject.service:
            return reject.ownership(doc, old)
        return reject.version(doc, old, getattr(req, "expected_version", None))

    def _replay(
        self, tenant: str, event_id: str, fingerprint: bytes, reject: _Rejecter
    ) -> Receipt | Rejection | None:
        found = self._get(k.receipt_pk(tenant, event_id), "RECEIPT")
        if found is None:
            return None
        if bytes(found["fingerprint"]) != fingerprint:
            return reject(
                "ConflictingEventReuse",
                f"event id {event_id} was already accepted "
                f"with different content (document {found['document_id']} version "
                f"{found['version']}); mint a new event id for a new change",
            )
        return Receipt(
            event_id=event_id,
            document_id=found["document_id"],
            run_id=int(found["run_id"]),
            version=int(found["version"]),
            owner=found.get("owner"),
            status=found["status"],
            accepted_at=k.parse_stamp(found["accepted_at"]),
            replayed=True,
        )

    # -- reads ----------------------------------------------------------------------------

    def _get(self, pk: str, sk: str) -> dict[str, Any] | None:
        found = self.db.get_item(
            TableName=self.table, Key=_item({"PK": pk, "SK": sk}), ConsistentRead=True
        ).get("Item")
        return _plain(found) if found else None

    def _latest(self, tenant: str, doc: str) -> dict[str, Any] | None:
        found = self.db.query(
            TableName=self.table,
            ConsistentRead=True,
            ScanIndexForward=False,
            Limit=1,
            KeyConditionExpression="PK = :pk AND begins_with(SK, :s)",
            ExpressionAttributeValues=_item({":pk": k.doc_pk(tenant, doc), ":s": "STATE#"}),
        )["Items"]
        return _plain(found[0]) if found else None

    def document(self, tenant: str, doc: str, run: int | None = None) -> dict[str, Any] | None:
        """The state, strongly consistent: the named run, else the latest."""
        item = (
            self._latest(tenant, doc)
            if run is None
            else self._get(k.doc_pk(tenant, doc), k.state_sk(run))
        )
        if item is None:
            return None
        return {
            "document_id": item["document_id"],
            "run_id": int(item["run_id"]),
            "owner": item.get("owner"),
            "status": item["status"],
            "version": int(item["version"]),
            "assigned_at": k.parse_stamp(item.get("assigned_at")),
            "due_at": k.parse_stamp(item.get("due_at")),
            "data": orjson.loads(item["data"]),
        }

    def history(self, tenant: str, doc: str, run: int) -> list[dict[str, Any]]:
        """Accepted versions in order (their events), strongly consistent."""
        return [
            orjson.loads(i["payload"])
            for i in self._query(
                KeyConditionExpression="PK = :pk AND begins_with(SK, :s)",
                ConsistentRead=True,
                ExpressionAttributeValues=_item(
                    {":pk": k.doc_pk(tenant, doc), ":s": f"EVENT#{run:06d}#"}
                ),
            )
        ]

    def owner_documents(
        self, tenant: str, owner: str, *, overdue: bool = False, limit: int = 50
    ) -> list[dict[str, Any]]:
        """An owner's documents, oldest assignment (or, overdue, earliest deadline) first.
        From a GSI: eventually consistent (DynamoDB offers nothing else on a GSI)."""
        index, pk, sk = (
            (k.BY_OWNER_DUE, "G2PK", "G2SK") if overdue else (k.BY_OWNER, "G1PK", "G1SK")
        )
        condition = f"{pk} = :o" + (f" AND {sk} < :now" if overdue else "")
        values = {":o": k.owner_key(tenant, owner)}
        if overdue:
            values[":now"] = k.stamp(datetime.now(UTC))
        found = self.db.query(
            TableName=self.table,
            IndexName=index,
            Limit=limit,
            KeyConditionExpression=condition,
            ExpressionAttributeValues=_item(values),
        )["Items"]
        return [
            {"document_id": i["document_id"], "run_id": int(i["run_id"])}
            for i in map(_plain, found)
        ]

    def owner_counts(self, tenant: str) -> dict[str, int]:
        """Assigned documents per owner: every service's shards summed (BatchGetItem)."""
        owners = [
            i["name"]
            for i in self._query(
                KeyConditionExpression="PK = :pk",
                ConsistentRead=True,
                ExpressionAttributeValues=_item({":pk": k.services_pk(tenant)}),
            )
        ]
        keys = [
            {"PK": k.count_pk(tenant, o, s), "SK": "COUNT"} for o in owners for s in range(k.SHARDS)
        ]
        counts: dict[str, int] = {}
        for start in range(0, len(keys), 100):  # 100 keys per BatchGetItem
            pending: dict[str, Any] = {
                self.table: {
                    "Keys": [_item(key) for key in keys[start : start + 100]],
                    "ConsistentRead": True,
                }
            }
            while pending:
                answer = self.db.batch_get_item(RequestItems=pending)
                for item in answer["Responses"].get(self.table, []):
                    found = _plain(item)
                    counts[found["owner"]] = counts.get(found["owner"], 0) + int(found["assigned"])
                pending = answer.get("UnprocessedKeys") or {}
        return {o: n for o, n in sorted(counts.items()) if n}

    def rejections(self, tenant: str, limit: int = 50) -> list[dict[str, Any]]:
        found = self.db.query(
            TableName=self.table,
            ScanIndexForward=False,
            Limit=limit,
            KeyConditionExpression="PK = :pk",
            ConsistentRead=True,
            ExpressionAttributeValues=_item({":pk": k.rejections_pk(tenant)}),
        )
        return [_plain(i) for i in found["Items"]]

    def _query(self, **args: Any) -> Iterator[dict[str, Any]]:
        """Every item of a query, page after page (1 MB each)."""
        args["TableName"] = self.table
        while True:
            answer = self.db.query(**args)
            yield from (_plain(i) for i in answer["Items"])
            if "LastEvaluatedKey" not in answer:
                return
            args["ExclusiveStartKey"] = answer["LastEvaluatedKey"]


class _Rejecter:
    """Records a rejection (an item of its own) and answers it."""

    def __init__(self, store: DynamoStore, tenant: str, service: str, request: dict[str, Any]):
        self.store, self.tenant, self.service, self.request = store, tenant, service, request

    def __call__(
        self, code: str, message: str, version: int | None = None, owner: str | None = None
    ) -> Rejection:
        now = datetime.now(UTC)
        self.store.db.put_item(
            TableName=self.store.table,
            Item=_item(
                items.rejection(
                    self.tenant,
                    k.stamp(now),
                    uuid.uuid4().hex[:8],
                    {
                        "code": code,
                        "message": message,
                        "sender": self.service,
                        "document_id": self.request.get("documentId"),
                        "event_id": self.request.get("eventId"),
                        "event_type": self.request.get("eventType"),
                        "expected_version": self.request.get("expectedVersion"),
                        "current_version": version,
                        "current_owner": owner,
                        "requested_owner": self.request.get("nextOwner"),
                        "status": self.request.get("status"),
                    },
                )
            ),
        )
        return Rejection(code=code, message=message, current_version=version, current_owner=owner)

    def ownership(self, doc: str, state: dict[str, Any]) -> Rejection:
        """The document is not the sender's (any more)."""
        owner = state.get("owner")
        return self("OwnershipMismatch",
                    f"{doc} is owned by {owner or 'nobody (finished)'}, not by {self.service}",
                    int(state["version"]), owner)  # fmt: skip

    def version(self, doc: str, state: dict[str, Any], expected: int | None) -> Rejection:
        """The sender expected another version than the document is at."""
        return self("VersionMismatch", f"{doc} is at version {state['version']}, not {expected}",
                    int(state["version"]), state.get("owner"))  # fmt: skip


def _next_state(
    tenant: str,
    doc: str,
    run: int,
    before: dict[str, Any] | None,
    req: Request,
    service: str,
    owner: str | None,
    now: datetime,
) -> dict[str, Any]:
    """The state item after the change, with the GSI keys only while they apply."""
    stamp = k.stamp(now)
    assigned: str | None
    due: str | None
    if before is None:
        version, assigned, due = 1, stamp, k.stamp(req.due_at) if req.due_at else None
        created, data = stamp, dict(req.data or {})
    else:
        version = int(before["version"]) + 1
        same = owner is not None and owner == service
        assigned = None if owner is None else (before.get("assigned_at") if same else stamp)
        given = k.stamp(req.due_at) if req.due_at else None
        due = None if owner is None else ((given or before.get("due_at")) if same else given)
        created = before["created_at"]
        data = {**orjson.loads(before.get("data") or "{}"), **(req.data or {})}
    return items.state(
        tenant, doc, run, version, owner, req.status, assigned_at=assigned, due_at=due,
        created_at=created, updated_at=stamp, completed_at=stamp if owner is None else None,
        data=orjson.dumps(data).decode(),
    )  # fmt: skip


def _event(
    state: dict[str, Any],
    before: dict[str, Any] | None,
    req: Request,
    service: str,
    now: datetime,
) -> dict[str, Any]:
    """The EVENT item of the change that leads to ``state``."""

    def micros(text: str | None) -> int | None:
        return _micros(k.parse_stamp(text))

    occurred = _micros(now)
    assert occurred is not None
    return items.event(
        state["tenant"], state["document_id"], state["run_id"], state["version"],
        event_id=req.event_id, event_type=req.event_type, source=service,
        occurred_at=occurred, owner=state.get("owner"),
        previous_owner=before.get("owner") if before else None, status=state["status"],
        assigned_at=micros(state.get("assigned_at")), due_at=micros(state.get("due_at")),
        data=orjson.loads(state["data"]), correlation_id=req.correlation_id,
        causation_id=req.causation_id,
    )  # fmt: skip
