"""The admin side of the storage seam: listings, stats, cancel, redrive, purge.

Internal and unstable, like ``sepp.storage.base``. Times are integer µs since the
epoch (UTC); ids 16-byte UUID blobs; states the ``State`` numbers. A backend
exposes an ``AdminStore`` as ``store.admin``.

Listings are keyset-paginated: ``list_jobs`` returns a page plus the sort key of its
last row (a short JSON-able list), which the caller hands back as ``after`` for the
next page. The sort key of a job never changes while the job stays in the state being
listed, and it is unique (it ends with the job's enqueue sequence), so a job that
does not change state while a listing is paged appears exactly once.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from sepp.domain.admin import FlowRead, MinuteRow, Outcome, QueueGauges, StateCounts, WriteResult
from sepp.domain.listing import DeadFilter, JobPage, JobQuery, JobSummary, SortKey
from sepp.domain.params import FlowLimits
from sepp.domain.policy import PolicyLookup
from sepp.domain.states import State
from sepp.domain.transitions import CancelAction, Redrive, redrive
from sepp.storage.type_figures import TypeFiguresRead, TypeMinute, TypeRunBucket

# The value types live in ``sepp.domain.listing`` and ``sepp.domain.admin`` (the UI and the
# RPC edge read them without importing the storage seam); re-exported so the drivers keep
# one import.
__all__ = ["AdminStore", "DeadFilter", "FlowRead", "JobPage", "JobQuery", "JobSummary", "MinuteRow", "Outcome",
           "QueueGauges", "SortKey", "StateCounts", "WriteResult", "cancel_result", "count_or_zero",
           "first_position", "position_int"]

_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1


def position_int(value: Any) -> int:
    """A field of a page position (``SortKey``): a stored int64 (seq, run_at, …). Anything
    else, or outside int64, is a malformed token: ``ValueError``, for every
    backend alike."""
    if isinstance(value, bool) or not isinstance(value, int) or not _INT64_MIN <= value <= _INT64_MAX:
        raise ValueError("malformed page position")
    return value


def first_position(after: Any, n: int) -> tuple[int, ...]:
    """The first page's position (``n`` × the smallest int64) when there is no ``after``; a
    position of the wrong length is malformed (``ValueError``)."""
    if after:
        raise ValueError("malformed page position")
    return (_INT64_MIN,) * n


def count_or_zero(value: Any) -> int:
    """A stored count as a non-negative int (anything else reads as 0: a damaged row never
    fails a listing)."""
    return value if isinstance(value, int) and value >= 0 else 0


def requeue_plan(row: Sequence[Any] | None, now: int) -> WriteResult | tuple[Any, str, Redrive]:
    """A driver's judgement of an admin requeue at ``now`` (µs) of the job whose
    ``admin_lookup`` row (seq, queue, state) is ``row`` (``None``: no such job): the answer
    when there is nothing to write (``NOT_FOUND``, or ``WRONG_STATE``: ``transitions.redrive``
    said no), else (seq, queue, the columns to write)."""
    if row is None:
        return WriteResult(Outcome.NOT_FOUND)
    seq, queue, state = row
    decision = redrive(state, now)
    if decision is None:
        return WriteResult(Outcome.WRONG_STATE, queue, state)
    return seq, queue, decision


def cancel_result(action: CancelAction, queue: str, state: int) -> WriteResult:
    """What a cancel of a job of ``queue`` found in ``state`` answers once the driver wrote
    ``action`` (``transitions.cancel``'s): ``DONE`` (now CANCELLED), ``CANCEL_REQUESTED``,
    ``UNCHANGED`` (cancelled already) or ``WRONG_STATE``."""
    if action is CancelAction.CANCEL:
        return WriteResult(Outcome.DONE, queue, int(State.CANCELLED))
    if action is CancelAction.REQUEST:
        return WriteResult(Outcome.CANCEL_REQUESTED, queue, state)
    if action is CancelAction.UNCHANGED:
        return WriteResult(Outcome.UNCHANGED, queue, state)
    return WriteResult(Outcome.WRONG_STATE, queue, state)


class AdminStore(Protocol):
    """Admin operations of a backend. Every method may raise ``StoreClosed``/``StoreError``."""

    async def list_jobs(self, query: JobQuery, after: SortKey | None, limit: int, budget: int = 0) -> JobPage:
        """Up to ``limit`` jobs matching ``query`` after the position ``after`` (None = start);
        a search page examines at most ``budget`` candidates (0 = ``search.SCAN_ROWS``).

        Raises ``ValueError`` when ``after`` does not fit the query's sort order.
        """

    async def state_counts(self, queue: str | None) -> dict[str, StateCounts]:
        """Counts per state of one queue (``queue``) or of every queue with jobs (None)."""

    async def count_jobs(self, query: JobQuery) -> int:
        """How many jobs of ``query.queue`` in ``query.state`` (both required) match the
        query's job type and finish-time bounds (``reason_prefix`` is not applied): the
        dry-run count of a bulk action. Raises ``ValueError`` without a
        queue or state."""

    async def oldest_ready(self, queue: str) -> int | None:
        """The smallest run_at (µs) among the queue's READY jobs, or None."""

    async def oldest_deferred(self, queues: Sequence[str]) -> dict[str, int]:
        """Queue → enqueued_at (µs) of its DEFERRED job of lowest enqueue sequence (the one
        waiting longest, enqueue order), for those of ``queues`` that have one; one index seek
        per queue (docs/workflows.md)."""

    async def waiting_on(self, seq: int) -> list[bytes]:
        """The ids (16 bytes) of the dependencies the job of ``seq`` still waits for (not
        COMPLETED yet), by their enqueue sequence; [] for a job that waits for nothing."""

    async def reserved_by_worker(self) -> dict[str, int]:
        """RESERVED jobs per ``worker_id`` right now, every queue (a worker's jobs
        in flight); jobs reserved without a worker id count under ``""``."""

    async def queue_gauges(self) -> QueueGauges:
        """Counts per state of every queue with jobs and the oldest READY run_at of every
        queue with READY jobs (``QueueGauges``), for the ``/metrics`` gauges. Reads
        every stored job's index entry once: the server calls it off the scrape path (see
        ``sepp.server.metrics.gauges``)."""

    async def flow_read(self, queue: str, limits: FlowLimits) -> FlowRead:
        """The flow state of ``queue`` right now for the held-back view (``FlowRead``): its
        token bucket row when ``limits`` has a rate limit, and with a per-key limit the
        ``flow_keys.key_room`` of its RESERVED jobs and first ``flow_keys.KEY_SCAN`` READY
        jobs (bounded: at most that many rows read). Reads only, no lock taken."""

    async def throughput(self, since_minute: int) -> list[MinuteRow]:
        """Every throughput row from ``since_minute`` on."""

    async def add_counts(self, counts: Mapping[tuple[str, int], tuple[int, int, int]],
                         keep_after_minute: int) -> None:
        """Add in-memory counts {(queue, minute): (enqueued, completed, dead_lettered)} and drop
        rows older than ``keep_after_minute``, in one commit."""

    async def add_type_figures(self, minutes: Sequence[TypeMinute], buckets: Sequence[TypeRunBucket],
                               keep_minutes_after: int, keep_hours_after: int) -> None:
        """Add a node's in-memory job-type figures (counts per (queue, job_type, step, minute),
        runs per run-time bucket; rows of one key at most once) to the stored ones — added to,
        never overwritten; the longest run kept with max — and drop the minute rows older than
        minute ``keep_minutes_after`` and the hour rows older than ``keep_hours_after``, in one
        commit (``sepp.storage.type_figures``)."""

    async def type_figures(self, queue: str, day_minute: int, hour_minute: int) -> TypeFiguresRead:
        """The stored job-type figures of ``queue``, summed over every node: the day's from the
        hour rows starting at ``day_minute`` or later, the hour's from the minute rows from
        ``hour_minute`` on (``TypeFiguresRead``)."""

    async def find_idempotency(self, queue: str, key: str) -> tuple[bytes, int] | None:
        """(job id, expires_at µs) of a claimed key, expired or not; None when unclaimed."""

    async def cancel(self, job_id: bytes, now: int, policy: PolicyLookup, reason: str) -> WriteResult:
        """SCHEDULED/READY/DEFERRED → CANCELLED (finished_at = now, kept for the queue's dead-letter
        retention); RESERVED → cancel_requested set; CANCELLED → UNCHANGED; else WRONG_STATE."""

    async def requeue(self, job_id: bytes, now: int, revive_dependents: bool = True) -> WriteResult:
        """DEAD_LETTERED/CANCELLED → READY at ``now`` with attempt 0 (history kept; DEFERRED
        instead for a job that still waits for dependencies); else WRONG_STATE. Unless
        ``revive_dependents`` is False, the jobs CANCELLED because this one failed (and theirs
        in turn) wait again (docs/workflows.md "Redrive revives the dependents")."""

    async def count_dead(self, where: DeadFilter) -> int:
        """How many DEAD_LETTERED jobs match."""

    async def requeue_dead(self, where: DeadFilter, now: int, limit: int,
                           revive_dependents: bool = True) -> list[tuple[bytes, str, str]]:
        """Requeue up to ``limit`` matching DEAD_LETTERED jobs in one commit (the columns of
        ``transitions.redrive``: READY at ``now`` µs, attempt 0); returns (job id, queue, job
        type) of each job requeued. ``revive_dependents``: as ``requeue``."""

    async def delete_job(self, job_id: bytes, state: int | None = None) -> WriteResult:
        """Delete one job in any state (``DONE`` with its queue and the state it had), or
        ``NOT_FOUND``. With ``state``, only while the job is in that state: a job found in
        another is left alone (``WRONG_STATE`` with the state it is in) — what a ticked row or
        a bulk run over a state's listing asks, so a job that left the listed state since
        (a dead letter requeued and now running, say) is not deleted under its worker."""

    async def purge(self, queue: str, states: Sequence[int], limit: int) -> int:
        """Delete up to ``limit`` jobs of ``queue`` in ``states`` in one commit; returns how many."""

    async def delete_queue(self, queue: str) -> bool:
        """Delete the queue row, its throughput rows and its job-type figures if it holds no
        job; False otherwise."""
