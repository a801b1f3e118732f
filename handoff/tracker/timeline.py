"""A document's timeline as the UI tells it: accepted versions and rejections in time order."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from handoff.tracker.views import HistoryEntry, RejectionView


@dataclass(frozen=True)
class Entry:
    at: datetime
    accepted: bool
    headline: str
    detail: str
    version: int | None
    event_type: str | None
    trace_id: str | None = None


def _accepted(h: HistoryEntry) -> Entry:
    if h.owner_before is None and h.owner_after == h.sender:
        headline = f"{h.sender} created it"
    elif h.owner_before is None:
        headline = f"{h.sender} created it for {h.owner_after}"
    elif h.owner_after is None:
        headline = f"{h.sender} finished it"
    elif h.owner_before == h.owner_after:
        headline = f"{h.sender} made progress"
    else:
        headline = f"{h.sender} handed it to {h.owner_after}"
    return Entry(
        h.accepted_at, True, headline, f"status “{h.status}”", h.version, h.event_type, h.trace_id
    )


def _rejected(r: RejectionView) -> Entry:
    what = r.event_type or "a change"
    return Entry(
        r.rejected_at, False, f"{r.sender} tried {what}: {r.code}", r.message, None, r.event_type
    )


def of(versions: list[HistoryEntry], rejections: list[RejectionView]) -> list[Entry]:
    """Accepted versions of this run and rejections of the document, oldest first."""
    entries = [_accepted(h) for h in versions]
    entries += [_rejected(r) for r in rejections]
    return sorted(entries, key=lambda e: e.at)


@dataclass(frozen=True)
class Stage:
    """A stretch of time with one owner: from the handoff to it until the next one."""

    owner: str
    entered: datetime
    left: datetime | None  # None: it is still there

    def took(self, now: datetime) -> timedelta:
        return (self.left or now) - self.entered


def stages(versions: list[HistoryEntry]) -> list[Stage]:
    """The owners a run passed through, in order, with when each had it."""
    found: list[Stage] = []
    holder: str | None = None
    since: datetime | None = None
    for h in versions:
        if h.owner_after == holder:
            continue  # progress: the same owner goes on
        if holder is not None and since is not None:
            found.append(Stage(holder, since, h.accepted_at))
        holder, since = h.owner_after, h.accepted_at
    if holder is not None and since is not None:
        found.append(Stage(holder, since, None))
    return found
