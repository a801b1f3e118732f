"""What the query API answers: camelCase JSON shapes, documented in OpenAPI."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel


class _View(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, frozen=True)


class DocumentView(_View):
    """The committed state of one run of a document."""

    document_id: str
    run_id: int
    owner: str | None = Field(description="null once the run is finished")
    status: str
    version: int
    assigned_at: datetime | None = Field(description="when the current assignment began")
    due_at: datetime | None
    created_at: datetime
    updated_at: datetime
    completed_at: datetime | None
    data: dict[str, Any]
    overdue: bool = Field(description="assigned and its deadline is before now")
    runs: int = Field(description="how many runs the document has had")


class HistoryEntry(_View):
    """One accepted version."""

    version: int
    event_id: str
    event_type: str
    sender: str
    owner_before: str | None
    owner_after: str | None
    status: str
    accepted_at: datetime
    assigned_at: datetime | None
    due_at: datetime | None
    data: dict[str, Any]
    correlation_id: str | None
    causation_id: str | None
    trace_id: str | None = Field(
        None,
        description="the OpenTelemetry trace of the unit that wrote this version; "
        "null when tracing was off",
    )


class HistoryPage(_View):
    document_id: str
    run_id: int
    items: list[HistoryEntry]
    next: str | None = Field(description="pass as `after` for the next page; null at the end")


class OwnerDocument(_View):
    """A document as listed on its owner's page."""

    document_id: str
    run_id: int
    status: str
    version: int
    assigned_at: datetime | None
    due_at: datetime | None
    updated_at: datetime
    overdue: bool


class OwnerPage(_View):
    owner: str
    items: list[OwnerDocument]
    next: str | None = Field(description="pass as `after` for the next page; null at the end")


class OwnerCounts(_View):
    owner: str
    assigned: int
    overdue: int
    oldest_assigned_at: datetime | None
    age_p50_from: datetime | None = Field(
        None, description="half of the waiting work was assigned after this (minute sample)"
    )
    age_p90_from: datetime | None = Field(
        None, description="90% of the waiting work was assigned after this (minute sample)"
    )


class OwnersSnapshot(_View):
    """Per-owner counts read in one snapshot, taken at ``asOf``."""

    as_of: datetime
    owners: list[OwnerCounts]


class RejectionView(_View):
    """A rejected attempt: nothing else changed when it was rejected."""

    id: int
    document_id: str | None
    run_id: int | None
    event_id: str | None
    event_type: str | None
    sender: str
    code: str
    message: str
    expected_version: int | None
    current_version: int | None
    current_owner: str | None
    requested_owner: str | None
    status: str | None
    rejected_at: datetime


class RejectionPage(_View):
    items: list[RejectionView]
    next: str | None = Field(description="pass as `after` for the next page; null at the end")


class CompletedDocument(_View):
    """A finished document (run), as listed in completed work."""

    document_id: str
    run_id: int
    status: str
    version: int
    created_at: datetime
    completed_at: datetime


class CompletedPage(_View):
    items: list[CompletedDocument]
    next: str | None = Field(description="pass as `after` for the next page; null at the end")


class PipelineStage(_View):
    """One owner as a stage of the flow, with its waiting work and its pace."""

    owner: str
    waiting: int
    overdue: int
    oldest_assigned_at: datetime | None
    arrived_per_minute: float = Field(description="documents handed to it, recent average")
    departed_per_minute: float = Field(description="documents it handed on or finished")
    quarantined: int = Field(description="its events waiting in quarantine for a person")
    next: list[str] = Field(description="where its work goes, most often first ('' finished)")
    column: int = Field(
        default=1, description="its place in the flow: the longest way from creation (1 first)"
    )

    @property
    def growing(self) -> bool:
        """More arrived than left in the window while work waits: its backlog grows."""
        return self.waiting > 0 and self.arrived_per_minute > self.departed_per_minute


class PipelineEdge(_View):
    """Documents handed from one owner to another ('' is creation or completion)."""

    from_owner: str
    to_owner: str
    moved: int = Field(description="documents that took this way in the window")
    total: int = Field(description="documents that took it since the flow was first folded")


class PipelineView(_View):
    """The stages in flow order, learned from the changes of owner so far."""

    as_of: datetime
    window_minutes: int = Field(description="the pace is averaged over this many minutes")
    created_per_minute: float
    completed_per_minute: float
    stages: list[PipelineStage]
    edges: list[PipelineEdge] = Field(default=[], description="the ways work has gone")


class OwnerSeries(_View):
    """One owner's points, as columns: the i-th of each list belong together."""

    owner: str
    at: list[datetime]
    assigned: list[int]
    overdue: list[int]
    oldest_s: list[float | None] = Field(description="age of the oldest waiting, seconds")


class Trends(_View):
    """Backlog and oldest age over a window for the 8 owners with the most waiting work
    now, and documents created and completed per bucket (columns, like the owners')."""

    window: str
    bucket_s: int
    since: datetime
    as_of: datetime
    owners: list[OwnerSeries]
    flow_at: list[datetime]
    created: list[int]
    completed: list[int]


class FoundDocument(_View):
    """A document (run) as Find lists it, active or finished."""

    document_id: str
    run_id: int
    owner: str | None
    status: str
    version: int
    assigned_at: datetime | None
    due_at: datetime | None
    updated_at: datetime
    completed_at: datetime | None
    overdue: bool


class FindPage(_View):
    """Matches in the order asked for. A request walks a bounded number of entries:
    a page that is not full but has ``next`` stopped at that bound, not at the end."""

    items: list[FoundDocument]
    scanned: int = Field(description="index entries this request walked")
    next: str | None = Field(description="pass as `after` to continue; null at the end")
