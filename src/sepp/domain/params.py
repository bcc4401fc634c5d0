"""Arguments and verdicts of the store operations: reserve, settle, extend, sweeps.

Times are integer microseconds since the Unix epoch (UTC); ids 16-byte UUID blobs.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple

from sepp.domain.clock import Clock

if TYPE_CHECKING:  # (records loads the limits, pydantic: the worker reads this module without them)
    from sepp.domain.records import JobRow, QueueRecord


@dataclass(frozen=True, slots=True)
class FlowLimits:
    """The flow-control limits of one queue as the store enforces them inside ``reserve``
    (docs/flow-control.md). Only queues with at least one limit set travel in
    ``ReserveParams.flow``: an unlimited queue keeps the plain reserve path.

    ``max_in_flight``: most jobs of the queue RESERVED at once (counted in the reserving
    transaction, under a per-queue lock on PostgreSQL, so it holds across nodes); 0 = none.
    The rate limit's bucket is a row per queue in the store, read and written in the same
    transaction (so every node draws from one bucket).
    """

    max_in_flight: int = 0
    #: ``rate_limit`` as a token bucket: ``rate_amount`` tokens per ``rate_period`` µs, refilled
    #: evenly, at most ``rate_burst`` tokens held (the bucket starts full). 0 = no rate limit.
    rate_amount: int = 0
    rate_period: int = 0
    rate_burst: int = 0
    #: ``concurrency_key`` / ``max_in_flight_per_key``: most RESERVED jobs per distinct value of
    #: the custom-map entry ``key`` (jobs without it share one group); 0 = no per-key limit.
    key: str = ""
    max_per_key: int = 0

    @property
    def active(self) -> bool:
        """True when any limit is set (the queue needs the limited reserve path)."""
        return self.max_in_flight > 0 or self.rate_amount > 0 or self.per_key

    @property
    def per_key(self) -> bool:
        """True when the per-key limit is set (the reserve picks jobs by group)."""
        return bool(self.key) and self.max_per_key > 0

    def bucket(self, stored: tuple[float, int] | None, now: int) -> Bucket:
        """The token bucket at ``now`` (µs) from its stored (tokens, updated_at): full when it
        was never used (``stored`` None), else the tokens plus ``rate_amount`` per
        ``rate_period`` elapsed, at most ``rate_burst``. A clock that went back (another
        node's) refills nothing and the bucket keeps its later time, so no interval is
        refilled twice."""
        if stored is None:
            return Bucket(float(self.rate_burst), now)
        tokens, at = float(stored[0]), int(stored[1])
        if now <= at:
            return Bucket(min(float(self.rate_burst), tokens), at)
        return Bucket(min(float(self.rate_burst), tokens + (now - at) * self.rate_amount / self.rate_period), now)

    def token_wait(self) -> float:
        """Seconds until one more token arrives in an empty bucket (0 without a rate limit):
        how long a long-polling Reserve held back by the rate waits before trying again."""
        return self.rate_period / self.rate_amount / 1e6 if self.rate_amount else 0.0


class Bucket(NamedTuple):
    """A queue's token bucket (``rate_limit``): ``tokens`` held (fractional) at
    ``at`` (µs UTC)."""

    tokens: float
    at: int

    @property
    def whole(self) -> int:
        """The reservations the bucket allows now (whole tokens; a hair of float error forgiven)."""
        return int(self.tokens + 1e-9)


#: No flow limits (the default of ``ReserveParams.flow``).
NO_FLOW: Mapping[str, FlowLimits] = {}


@dataclass(frozen=True, slots=True)
class ReserveParams:
    """Reserve up to ``max_jobs`` from ``queues`` in order; ``lease_for`` gives each queue's
    lease length in µs. The store gives the jobs of one call a fresh random 128-bit lease id
    (shared by them: a lease is the pair job id + lease id).

    ``now`` (µs UTC) is when the call was made. A lease runs from when it is granted, not
    from then (docs/decisions.md "A lease runs from when it is granted"): with a ``clock``
    the store reads ``grant_time()`` when it writes the lease, inside the transaction that
    commits it — after any wait in the commit queue — and stamps the jobs' ``started_at``
    and ``lease_expires_at`` (grant time + ``lease_for``) and its promotion and flow
    checks with that. Without one (``None``: storage tests with a fixed time) ``now`` is
    the grant time. The clock must be picklable (the SQLite writer may run in a process of
    its own: ``SystemClock`` is; a ``FakeClock`` arrives there as a copy that no longer moves).
    """

    queues: Sequence[str]
    max_jobs: int
    now: int
    lease_for: dict[str, int]
    worker_id: str
    #: Stop leasing once the jobs taken carry this many bytes of payload and history (the
    #: answer must fit in one message); the first job is always taken. 0 = no limit.
    max_bytes: int = 0
    #: The name of the node leasing (``node_name``, default the host name): stored
    #: on each job leased and written into the attempt's history entry. "" = unnamed.
    node: str = ""
    #: The flow limits of the queues that have any: queue → ``FlowLimits``. The
    #: store leases fewer jobs (or none) from such a queue when a limit holds them back.
    flow: Mapping[str, FlowLimits] = field(default_factory=dict)
    #: Where the grant time is read when the lease is written (see above); None: ``now``.
    clock: Clock | None = None

    def grant_time(self) -> int:
        """The time a lease granted right now starts (µs UTC): ``clock.now()`` read at this
        call, never earlier than ``now`` (a clock that stepped back does not move a lease
        before its call); ``now`` when there is no clock. Call it once per transaction, as
        late as possible before the lease is written."""
        clock = self.clock
        if clock is None:
            return self.now
        granted = clock.now()
        return granted if granted > self.now else self.now


def granted_expiry(now: int, expires_at: int, clock: Clock | None) -> int:
    """The expiry (µs UTC) an extension asked at ``now`` for ``expires_at`` gets when the
    store writes it: ``expires_at`` moved on by the time since ``now`` read from ``clock``
    (a wait in the commit queue is not taken out of the extension; docs/decisions.md "A
    lease runs from when it is granted"). ``expires_at`` itself without a clock, or when the
    clock reads no later than ``now``."""
    if clock is None:
        return expires_at
    late = clock.now() - now
    return expires_at + late if late > 0 else expires_at


#: Dead-letter reason of a job whose stored row could not be delivered.
DAMAGED_ROW = "DAMAGED_ROW"


class SettleKind(enum.Enum):
    """What a settle does with a reserved job."""

    ACK = "ack"
    RETRY = "retry"            # run_at given (backoff or explicit delay); dead-letters at max_attempts
    DEAD_LETTER = "dead_letter"
    RELEASE = "release"        # back to READY, attempt given back


class Children(NamedTuple):
    """The jobs an ack stores with its completion (``sepp.domain.children``; docs/workflows.md
    "A running job extends its workflow").

    ``rows``: the children in the order the handler gave them, then the callback (``then``)
    when there is one — each a ``JobRow`` with an id from ``Store.new_job_ids`` and no
    idempotency key. ``new_queues``: queues to create in the same commit; ``custom``: the
    custom-index entries (job id, key, value) of the rows. ``depends_on``: row index → the
    16-byte ids it depends on, rows in index order (a child: its own ``depends_on``, stored
    jobs only; the callback: every child's id, then its own); ``on_failure``: row index → its
    failure policy (``storage.dependencies``; absent: cancel). ``targets``: the indexes of the
    rows the acked job's dependents wait for instead of it (the callback, else every child).
    ``workflow_id``: 16 bytes, the workflow the acked job and its children join when the job
    has none yet (a job of a workflow keeps its own, and its children get it)."""

    rows: Sequence[JobRow]
    new_queues: Sequence[QueueRecord]
    custom: Sequence[tuple[bytes, str, str]]
    depends_on: Mapping[int, Sequence[bytes]]
    on_failure: Mapping[int, int]
    targets: Sequence[int]
    workflow_id: bytes


class SettleParams(NamedTuple):
    """One ack or nack. RETRY uses ``delay`` (µs) when ≥ 0, else the queue's
    backoff; DEAD_LETTER records ``reason``; ``outcome`` labels the attempt in history.

    An ACK may carry the job's ``result`` (its bytes; None = no result) and
    ``result_encoding`` (its label), stored in the same write as the completion; a result
    longer than the queue's ``max_result_bytes`` is refused (``transitions.settle``).

    An ACK may also carry ``children`` (``domain.children``): jobs stored in the same commit
    as the completion, or none when the attempt fails instead."""

    job_id: bytes
    lease_id: bytes
    kind: SettleKind
    now: int
    delay: int = -1
    reason: str = ""
    outcome: str = ""
    error_message: str = ""
    error_detail: str = ""
    result: bytes | None = None
    result_encoding: str = ""
    children: Children | None = None


class SettleError(enum.Enum):
    """Why a settle or extend was refused."""

    NOT_FOUND = "JOB_NOT_FOUND"
    LEASE_MISMATCH = "LEASE_MISMATCH"
    LEASE_EXPIRED = "LEASE_EXPIRED"


class SettleResult(NamedTuple):
    """The verdict on one settle: ``error`` is None on success; ``state``/``run_at`` say where
    the job went; ``queue`` is the job's queue (empty on error); ``started_at`` (µs UTC) is
    when the settled attempt was leased (0 when unknown: an error, a repeated ack), for
    ``sepp_job_runtime_seconds``; ``job_type`` the job's type ("" when unknown:
    an error, a repeated ack), for the job-type figures."""

    error: SettleError | None
    state: int = 0
    run_at: int = 0
    attempt: int = 0
    queue: str = ""
    started_at: int = 0
    job_type: str = ""


@dataclass(frozen=True, slots=True)
class ExtendResult:
    """The verdict on an extend: new expiry (µs) and whether an admin asked to cancel; for a
    live lease also the job's ``queue``, ``job_type`` and ``attempt`` (the live job events
    name them)."""

    error: SettleError | None
    lease_expires_at: int = 0
    cancel_requested: bool = False
    queue: str = ""
    job_type: str = ""
    attempt: int = 0


class SkippedRow(NamedTuple):
    """A row a sweep pass could not process and left as it was (sweeps isolate
    failures): the job's 16-byte id (for an idempotency key, the job that claimed it), its
    queue, the error (one line, already bounded: ``sepp.wire.quote``), and the key for an
    idempotency-key row. The pass handled every other row; the next pass tries this one again."""

    job_id: bytes
    queue: str
    error: str
    key: str | None = None


@dataclass(frozen=True, slots=True)
class SweepResult:
    """What a sweep pass changed: a count (rows moved or deleted), the queues that got newly
    READY jobs, how many jobs it dead-lettered per queue, and the rows it had to skip.

    For the metrics: ``expired`` is how many leases a reclaim took back per queue (every
    outcome: READY, DEAD_LETTERED, CANCELLED); ``promoted_run_at`` the run_at (µs UTC) of
    each job a promotion made READY (the lag is the pass's ``now`` minus it).

    For the job-type figures: ``expired_types`` counts a reclaim's outcomes by
    {(queue, job_type, new state): jobs}, the new state READY (retried), DEAD_LETTERED or
    CANCELLED.

    For the live job events: ``reclaimed_jobs`` holds (job id, queue, job type, new state,
    attempt) of each job a reclaim pass changed, ``promoted_jobs`` (job id, queue, job type,
    attempt, run_at) of each job a promotion sweep made READY."""

    count: int
    queues: frozenset[str] = field(default_factory=frozenset)
    dead_lettered: dict[str, int] = field(default_factory=dict)
    skipped: tuple[SkippedRow, ...] = ()
    expired: dict[str, int] = field(default_factory=dict)
    promoted_run_at: tuple[int, ...] = ()
    expired_types: dict[tuple[str, str, int], int] = field(default_factory=dict)
    reclaimed_jobs: tuple[tuple[bytes, str, str, int, int], ...] = ()
    promoted_jobs: tuple[tuple[bytes, str, str, int, int], ...] = ()


def promotion(rows: Sequence[Sequence[Any]]) -> SweepResult:
    """The ``SweepResult`` of a promotion statement's rows, each (queue, run_at µs, job id
    bytes, job type, attempt) — the RETURNING of ``promote_due_jobs`` on both backends:
    ``count``, ``queues``, ``promoted_run_at`` and ``promoted_jobs`` (job id, queue, job
    type, attempt, run_at) set."""
    return SweepResult(len(rows), frozenset(r[0] for r in rows), promoted_run_at=tuple(r[1] for r in rows),
                       promoted_jobs=tuple((bytes(r[2]), r[0], r[3], r[4], r[1]) for r in rows))
