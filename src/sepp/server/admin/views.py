"""What the admin engine answers with: ``QueueStatsView`` (a queue on the dashboards) and
``JobListing`` (one page of jobs). Times in µs UTC."""

from __future__ import annotations

from dataclasses import dataclass

from sepp.domain.admin import MinuteRow, StateCounts
from sepp.domain.listing import JobSummary
from sepp.server.admin.held_back import HeldBack
from sepp.server.queues import no_consumer


@dataclass(frozen=True, slots=True)
class QueueStatsView:
    """What the dashboards show of one queue. Times in µs; ``throughput`` has one row per
    minute of the window asked for (the last hour by default), oldest first, the current
    minute last."""

    name: str
    paused: bool
    counts: StateCounts
    oldest_ready_at: int | None
    throughput: list[MinuteRow]
    now: int
    #: The latest Reserve of the queue by any worker on any node (µs UTC), or None when no
    #: worker seen within the last hour polls it.
    last_reserve: int | None = None
    #: The queue's ``consumer_timeout``, seconds (0 = never flagged).
    consumer_timeout: float = 0.0
    #: READY jobs each flow limit holds back right now (``admin.held_back``), or None when
    #: the queue has no flow limit.
    held_back: HeldBack | None = None
    #: enqueued_at (µs UTC) of the DEFERRED job enqueued first, or None when none is DEFERRED.
    oldest_deferred_at: int | None = None

    @property
    def oldest_deferred_age(self) -> float | None:
        """Seconds the DEFERRED job enqueued first has waited for its dependencies, or None."""
        return None if self.oldest_deferred_at is None else max(0.0, (self.now - self.oldest_deferred_at) / 1e6)

    @property
    def oldest_ready_age(self) -> float | None:
        """Seconds the oldest READY job has waited, or None."""
        return None if self.oldest_ready_at is None else max(0.0, (self.now - self.oldest_ready_at) / 1e6)

    @property
    def no_consumer(self) -> bool:
        """The "no consumer" signal (``queues.no_consumer``): the queue is not paused,
        has READY jobs, the oldest has waited longer than ``consumer_timeout``, and no worker
        reserved from it within that time either (a queue just given its first job is not
        flagged at once)."""
        return no_consumer(self.paused, self.counts.ready, self.oldest_ready_at, self.last_reserve,
                           self.consumer_timeout, self.now)


@dataclass(frozen=True, slots=True)
class JobListing:
    """One page of ``list_jobs``; ``next_token`` is empty on the last page; ``scan_limited``:
    a search page that stopped at its scan bound before it was full (``JobPage``)."""

    jobs: list[JobSummary]
    next_token: str
    scan_limited: bool = False
    #: Candidates a search page examined (``JobPage.examined``); 0 for a plain listing.
    examined: int = 0
