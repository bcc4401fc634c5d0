"""The storage seam: domain-level operations every backend implements (STYLE habit 1).

Internal and unstable: only ``sepp.server`` uses it. Times are integer microseconds
since the Unix epoch (UTC); job and lease ids are 16-byte UUID blobs. Each write
method is one transaction (one commit), so "one commit per batch call" holds
(SPEC §2) and a crash never leaves half a call behind.
"""

from __future__ import annotations

import enum
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple, Protocol

from sepp.limits import MAX_TIMESTAMP_SECONDS, MIN_TIMESTAMP_SECONDS


class State(enum.IntEnum):
    """Job states; the numbers match ``sepp.api.v1.JobState`` and the schema."""

    SCHEDULED = 1
    READY = 2
    RESERVED = 3
    COMPLETED = 4
    DEAD_LETTERED = 5
    CANCELLED = 6


#: States a job never leaves on its own (retention applies).
FINISHED = (State.COMPLETED, State.DEAD_LETTERED, State.CANCELLED)


class JobRow(NamedTuple):
    """One validated job to store: exactly the INSERT parameters, in schema order.

    A tuple on purpose — the batched enqueue path builds hundreds of thousands per
    second and hands them straight to the driver.
    """

    id: bytes
    queue: str
    job_type: str
    state: int
    priority: int
    run_at: int
    enqueued_at: int
    max_attempts: int
    payload: bytes
    encoding: str
    extras: bytes | None
    idempotency_key: str | None


#: Deduplicated jobs of one enqueue call: row index → (original job id, its state now;
#: 0 when the original no longer exists).
Dedups = dict[int, tuple[bytes, int]]


@dataclass(frozen=True, slots=True)
class QueueRecord:
    """A persisted queue: settings as JSON text (``QueueSettings``), paused and declared flags."""

    name: str
    settings_json: str
    paused: bool
    declared: bool


class JobRecord(NamedTuple):
    """A full job row as read back (reservations, admin). Times are µs since the epoch (UTC).

    A tuple whose fields are the store's SELECT columns in order, so a reserve of
    hundreds of jobs builds its records with ``JobRecord._make(row)`` (no per-field
    Python code on the writer thread).
    """

    id: bytes
    queue: str
    job_type: str
    state: int
    priority: int
    run_at: int
    enqueued_at: int
    attempt: int
    max_attempts: int
    payload: bytes
    encoding: str
    extras: bytes | None
    idempotency_key: str | None
    lease_id: bytes | None
    lease_expires_at: int | None
    worker_id: str | None
    started_at: int | None
    history: str | None
    finished_at: int | None
    reason: str | None
    cancel_requested: int               # 0/1: an admin asked to cancel it (truth value)
    seq: int = 0

    def attempt_entries(self) -> list[dict[str, Any]]:
        """The attempt history, oldest first: dicts with ``attempt``, ``worker_id``,
        ``started_at``/``ended_at`` (µs UTC; started may be None), ``outcome``,
        ``error_message`` and ``error_detail``.

        The attempt that completed a job is not written to ``history`` (an ack only sets the
        state and ``finished_at``; docs/decisions.md "The completing attempt is implicit"): it
        is derived here from ``attempt``, ``worker_id``, ``started_at`` and ``finished_at``.
        """
        entries = _history_entries(self.history)
        if self.state == State.COMPLETED:
            last = entries[-1] if entries else None
            # Rows completed before schema 4 carry the entry already.
            if last is None or last.get("outcome") != "completed" or last.get("attempt") != self.attempt:
                entries.append({"attempt": self.attempt, "worker_id": self.worker_id or "",
                                "started_at": self.started_at, "ended_at": self.finished_at,
                                "outcome": "completed", "error_message": "", "error_detail": ""})
        return entries


#: An attempt entry's fields and the value a missing or mistyped one reads as.
_ENTRY_DEFAULTS: dict[str, Any] = {"attempt": 0, "worker_id": "", "started_at": None, "ended_at": None,
                                   "outcome": "", "error_message": "", "error_detail": ""}
_ENTRY_RANGE: dict[str, tuple[int, int]] = {
    "attempt": (-(2**31), 2**31 - 1),
    "started_at": (MIN_TIMESTAMP_SECONDS * 1_000_000, MAX_TIMESTAMP_SECONDS * 1_000_000 + 999_999),
    "ended_at": (MIN_TIMESTAMP_SECONDS * 1_000_000, MAX_TIMESTAMP_SECONDS * 1_000_000 + 999_999)}
_ENTRY_TYPES: dict[str, type] = {"attempt": int, "worker_id": str, "started_at": int, "ended_at": int,
                                 "outcome": str, "error_message": str, "error_detail": str}


def _history_entries(history: Any) -> list[dict[str, Any]]:
    """A ``history`` column as attempt entries. A damaged column (not JSON, not an array,
    entries that are not objects or have fields of the wrong type) never raises: what cannot
    be read is left out or reads as the field's default (issue 14: a poison row must not
    stop the reads of the others, and its own page still shows what can be read)."""
    if not history:
        return []
    try:
        data = json.loads(history)
    except (TypeError, ValueError):
        return []
    if not isinstance(data, list):
        return []
    entries = []
    for item in data:
        if not isinstance(item, dict):
            continue
        entry = dict(item)
        for key, default in _ENTRY_DEFAULTS.items():
            value = entry.get(key, default)
            kind = _ENTRY_TYPES[key]
            if value is not None and (not isinstance(value, kind) or isinstance(value, bool)):
                value = default
            if kind is int and value is not None and not _ENTRY_RANGE[key][0] <= value <= _ENTRY_RANGE[key][1]:
                value = default  # beyond a Timestamp (times) or an int32 (attempt)
            entry[key] = value
        entries.append(entry)
    return entries


@dataclass(frozen=True, slots=True)
class ReserveParams:
    """Reserve up to ``max_jobs`` from ``queues`` in order; ``lease_for`` gives each queue's
    lease length in µs. The store gives the jobs of one call a fresh random 128-bit lease id
    (shared by them: a lease is the pair job id + lease id)."""

    queues: Sequence[str]
    max_jobs: int
    now: int
    lease_for: dict[str, int]
    worker_id: str
    #: Stop leasing once the jobs taken carry this many bytes of payload and history (the
    #: answer must fit in one message); the first job is always taken. 0 = no limit.
    max_bytes: int = 0


#: Dead-letter reason of a job whose stored row could not be delivered (issue 14 O4).
DAMAGED_ROW = "DAMAGED_ROW"


class SettleKind(enum.Enum):
    """What a settle does with a reserved job (SPEC §3)."""

    ACK = "ack"
    RETRY = "retry"            # run_at given (backoff or explicit delay); dead-letters at max_attempts
    DEAD_LETTER = "dead_letter"
    RELEASE = "release"        # back to READY, attempt given back


@dataclass(frozen=True, slots=True)
class QueuePolicy:
    """What the store needs to know of a queue's settings inside a write (all µs)."""

    backoff_base: int = 1_000_000
    backoff_cap: int = 3_600_000_000
    jitter: float = 0.2
    completed_retention: int = 86_400_000_000
    dead_retention: int = 14 * 86_400_000_000

    def backoff(self, attempt: int, rand: float) -> int:
        """Delay before retry number ``attempt`` (1-based), µs: base × 2^(attempt−1), capped,
        then scaled by (1 + jitter × rand) with ``rand`` uniform in [−1, 1] (SPEC §3)."""
        delay = min(self.backoff_cap, self.backoff_base * (2 ** min(attempt - 1, 62)))
        return max(0, int(delay * (1 + self.jitter * rand)))


#: Looks a queue's policy up by name (called inside writes, where the writer runs).
PolicyLookup = Callable[[str], QueuePolicy]


class PolicyTable:
    """A picklable, immutable ``PolicyLookup`` (it travels to the writer process with the
    writes that need it): the policies of the queues whose settings differ from the
    defaults, and ``default`` for every other name."""

    __slots__ = ("custom", "default")

    def __init__(self, default: QueuePolicy, custom: dict[str, QueuePolicy] | None = None) -> None:
        self.default = default
        self.custom = custom or {}

    def __call__(self, name: str) -> QueuePolicy:
        return self.custom.get(name, self.default)

    def __reduce__(self) -> tuple[Any, ...]:
        return (PolicyTable, (self.default, self.custom))


class SettleParams(NamedTuple):
    """One ack or nack (SPEC §3). RETRY uses ``delay`` (µs) when ≥ 0, else the queue's
    backoff; DEAD_LETTER records ``reason``; ``outcome`` labels the attempt in history."""

    job_id: bytes
    lease_id: bytes
    kind: SettleKind
    now: int
    delay: int = -1
    reason: str = ""
    outcome: str = ""
    error_message: str = ""
    error_detail: str = ""


class SettleError(enum.Enum):
    """Why a settle or extend was refused (SPEC §3, §6)."""

    NOT_FOUND = "JOB_NOT_FOUND"
    LEASE_MISMATCH = "LEASE_MISMATCH"
    LEASE_EXPIRED = "LEASE_EXPIRED"


class SettleResult(NamedTuple):
    """The verdict on one settle: ``error`` is None on success; ``state``/``run_at`` say where
    the job went; ``queue`` is the job's queue (empty on error)."""

    error: SettleError | None
    state: int = 0
    run_at: int = 0
    attempt: int = 0
    queue: str = ""


@dataclass(frozen=True, slots=True)
class ExtendResult:
    """The verdict on an extend: new expiry (µs) and whether an admin asked to cancel."""

    error: SettleError | None
    lease_expires_at: int = 0
    cancel_requested: bool = False


class SkippedRow(NamedTuple):
    """A row a sweep pass could not process and left as it was (issue 14 "sweeps isolate
    failures"): the job's 16-byte id (for an idempotency key, the job that claimed it), its
    queue, the error (one line, already bounded: ``sepp.wire.quote``), and the key for an
    idempotency-key row. The pass handled every other row; the next pass tries this one again."""

    job_id: bytes
    queue: str
    error: str
    key: str | None = None


@dataclass(frozen=True, slots=True)
class SweepResult:
    """What a sweep pass changed: a count (rows moved or deleted), the queues that got newly
    READY jobs, how many jobs it dead-lettered per queue, and the rows it had to skip."""

    count: int
    queues: frozenset[str] = field(default_factory=frozenset)
    dead_lettered: dict[str, int] = field(default_factory=dict)
    skipped: tuple[SkippedRow, ...] = ()


class Store(Protocol):
    """Domain-level storage operations; implemented by SQLiteStore (and PostgreSQL later).

    Every method may raise ``StoreClosed`` after ``close()`` began, and ``StoreError``
    for a failure of the backend.
    """

    async def open(self) -> None:
        """Create or migrate the schema and start the writer."""

    async def close(self) -> None:
        """Finish pending writes (each acked write is committed), then release everything."""

    @property
    def backlog(self) -> int:
        """Jobs submitted to the writer and not yet committed (for load shedding)."""

    async def enqueue(self, rows: Sequence[JobRow], dedup_until: Sequence[int], now: int,
                      new_queues: Sequence[QueueRecord] = ()) -> Dedups:
        """Store ``rows`` in one commit. A row with an idempotency key is deduplicated
        against unexpired keys (``now``) and earlier rows of the same call; otherwise it
        claims its key until ``dedup_until[i]`` (µs). ``new_queues`` are created (if
        absent) in the same commit. Returns the deduplicated rows (others were stored)."""

    async def load_queues(self) -> list[QueueRecord]:
        """Every persisted queue."""

    async def upsert_queue(self, queue: QueueRecord, now: int) -> None:
        """Create or replace a queue's settings/flags."""

    async def reserve(self, params: ReserveParams) -> list[JobRecord]:
        """Promote due scheduled jobs, then move up to ``max_jobs`` READY jobs to RESERVED."""

    async def reserve_damaged(self, leases: Sequence[tuple[bytes, bytes]], now: int) -> int:
        """Dead-letter leased jobs (job id, lease id) whose rows could not be delivered (a
        damaged column: ``storage.rows``) with reason ``DAMAGED_ROW``; their history is not
        touched and they are kept until an admin deletes or requeues them (no purge time).
        Returns how many were still held by those leases. (Issue 14 O4.)"""

    async def settle(self, items: Sequence[SettleParams], policy: PolicyLookup) -> list[SettleResult]:
        """Apply acks/nacks in one commit; one result per item, in order."""

    async def extend(self, job_id: bytes, lease_id: bytes, now: int, expires_at: int) -> ExtendResult:
        """Move a live lease's expiry to ``expires_at``."""

    async def promote_due(self, now: int, limit: int) -> SweepResult:
        """SCHEDULED jobs with run_at ≤ now → READY (at most ``limit``).

        Every sweep (this, ``reclaim_expired``, ``prune``) isolates failures: a row it cannot
        process is left as it is and reported in ``SweepResult.skipped``; every other due row
        is still handled in the same pass (issue 14). Only a failure of the store as a whole
        (``StoreError``) fails the pass."""

    async def next_due(self) -> int | None:
        """The earliest run_at of a SCHEDULED job, or None."""

    async def reclaim_expired(self, now: int, limit: int, policy: PolicyLookup) -> SweepResult:
        """RESERVED jobs whose lease ran out → READY, or DEAD_LETTERED (LEASE_EXPIRED) on the last attempt."""

    async def prune(self, now: int, limit: int) -> SweepResult:
        """Delete finished jobs past their retention and expired idempotency keys (at most
        ``limit`` of each); ``count`` is the rows deleted."""

    async def get_job(self, job_id: bytes) -> JobRecord | None:
        """One job by id, or None."""
