"""A job listing and a redrive, as the admin side asks for them: the filter of a listing
(``JobQuery``), one page of it (``JobPage`` of ``JobSummary`` rows, ``SortKey`` positions) and
the filter of a bulk redrive (``DeadFilter``).

The storage seam's ``AdminStore`` takes and returns them; the admin engine, the web UI and
the RPC edge build and read them, so they live here, below all of them (the
``http-rpc-no-storage`` contract keeps the UI and the RPC handlers off ``sepp.storage``).
Times are integer µs since the epoch (UTC); ids 16-byte UUID blobs; states the ``State``
numbers.
"""

from __future__ import annotations

from dataclasses import dataclass
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
