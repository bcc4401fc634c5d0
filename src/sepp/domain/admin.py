"""The admin side's value types: a job listing's filter and page, a redrive's filter,
single-job write verdicts, counts per state, the throughput of a minute and the reads
behind the ``/metrics`` gauges and the held-back view.

The storage seam's ``AdminStore`` takes and returns them, and the server's admin, its web
UI and its gRPC edge speak them, so they live here, below both (the ``http-rpc-no-storage``
contract keeps the UI and the RPC handlers off ``sepp.storage``). Times are integer µs since
the epoch (UTC); ids 16-byte UUID blobs; states the ``State`` numbers.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any

from sepp.domain.records import JobRecord

#: A page position: the sort key of the last row of the previous page (JSON-able).
SortKey = list[Any]


@dataclass(frozen=True, slots=True)
class JobQuery:
    """Filters of a job listing; ``None`` = any.

    ``reason_prefix`` matches the start of the dead-letter/cancel reason;
    ``finished_after`` ≤ finished_at < ``finished_before`` (µs).

    Search filters (``sepp.storage.search``): ``job_id`` (16-byte id) and
    ``idempotency_key`` exact; ``error_contains`` a substring of the last recorded
    attempt's error message, A-Z folded to a-z (so never a COMPLETED job); ``custom`` pairs
    (key, value as text, ``search.value_text``) that must all be entries of the job. A
    query with any of them, or with ``job_type``, is a search: its pages are bounded
    (``JobPage.scan_limited``), and one driven by id, key or custom entry lists in enqueue
    order whatever the state.

    ``retries``: with ``state`` SCHEDULED, only the jobs waiting for a retry (attempt > 0:
    a failed attempt scheduled again), not the ones scheduled for their first run; walked
    through the ``jobs_retrying`` index (SQLite migration 0011, PostgreSQL 0011).
    """

    queue: str | None = None
    state: int | None = None
    job_type: str | None = None
    reason_prefix: str | None = None
    finished_after: int | None = None
    finished_before: int | None = None
    job_id: bytes | None = None
    idempotency_key: str | None = None
    error_contains: str | None = None
    custom: tuple[tuple[str, str], ...] = ()
    retries: bool = False

    @property
    def searching(self) -> bool:
        """Whether the query has a search filter (then ``sepp.storage.search`` answers it)."""
        return (self.job_type is not None or self.job_id is not None or self.idempotency_key is not None
                or self.error_contains is not None or bool(self.custom))

    @property
    def indexed(self) -> bool:
        """Whether an index hands over the candidates (id, key or custom entry): then the
        page order is enqueue order, sort key ``[seq]``."""
        return self.job_id is not None or self.idempotency_key is not None or bool(self.custom)


@dataclass(frozen=True, slots=True)
class JobSummary:
    """A listed job: the record without payload bytes and history, plus what a table shows."""

    record: JobRecord
    payload_bytes: int
    attempts_recorded: int
    last_error: str


@dataclass(frozen=True, slots=True)
class JobPage:
    """One page of a listing; ``next_key`` is None on the last page. ``scan_limited``: a
    search page that stopped at its scan bound before it was full (more may match from
    ``next_key`` on; ``sepp.storage.search``)."""

    jobs: list[JobSummary]
    next_key: SortKey | None
    scan_limited: bool = False
    #: Candidates a search page examined (0 for a plain listing): jobs of the walk, or for a
    #: search over every state the span of enqueue positions it covered.
    examined: int = 0


@dataclass(frozen=True, slots=True)
class DeadFilter:
    """Which DEAD_LETTERED jobs a bulk redrive takes (µs bounds on the dead-letter time)."""

    queue: str | None = None
    job_type: str | None = None
    reason_prefix: str | None = None
    after: int | None = None
    before: int | None = None


class Outcome(enum.Enum):
    """The verdict of a single-job admin write."""

    DONE = "done"
    NOT_FOUND = "not_found"
    WRONG_STATE = "wrong_state"
    CANCEL_REQUESTED = "cancel_requested"   # RESERVED: asked cooperatively
    UNCHANGED = "unchanged"                 # already in the target state


@dataclass(frozen=True, slots=True)
class WriteResult:
    """``outcome`` plus the job's queue and state as found (0 / "" when not found)."""

    outcome: Outcome
    queue: str = ""
    state: int = 0


@dataclass(frozen=True, slots=True)
class StateCounts:
    """Jobs per state of one queue."""

    scheduled: int = 0
    ready: int = 0
    reserved: int = 0
    completed: int = 0
    dead_lettered: int = 0
    cancelled: int = 0

    @property
    def total(self) -> int:
        """Jobs of every state."""
        return (self.scheduled + self.ready + self.reserved + self.completed + self.dead_lettered
                + self.cancelled)


@dataclass(frozen=True, slots=True)
class QueueGauges:
    """What the ``/metrics`` queue gauges show, read in one call: ``counts`` the
    jobs per state of every queue with jobs (``state_counts(None)``), ``oldest_ready`` the
    smallest run_at (µs UTC) of the READY jobs of every queue that has some."""

    counts: dict[str, StateCounts]
    oldest_ready: dict[str, int]
    #: Queue → the latest Reserve by a worker of another node (µs UTC), from the worker rows:
    #: filled in by the server's metrics read for ``sepp_queue_no_consumer``, not
    #: by the store's ``queue_gauges``.
    last_reserve: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class FlowRead:
    """What the held-back view of a flow-limited queue reads from the store
    (``AdminStore.flow_read``): ``bucket`` the stored token bucket (tokens,
    updated_at µs) or None (never used, or no rate limit asked for); ``key_allowed`` /
    ``key_scanned`` the per-key limit's ``flow_keys.key_room`` (0, 0 without one)."""

    bucket: tuple[float, int] | None = None
    key_allowed: int = 0
    key_scanned: int = 0


@dataclass(frozen=True, slots=True)
class MinuteRow:
    """Throughput of one queue in one minute (``minute`` = µs // 60,000,000)."""

    queue: str
    minute: int
    enqueued: int
    completed: int
    dead_lettered: int
