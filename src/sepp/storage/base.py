"""The storage seam: domain-level operations every backend implements (STYLE habit 1).

Internal and unstable: only ``sepp.server`` uses it. Times are integer microseconds
since the Unix epoch (UTC); job and lease ids are 16-byte UUID blobs. Each write
method is one transaction (one commit), so "one commit per batch call" holds
and a crash never leaves half a call behind.

The types the operations take and return live in ``sepp.domain``; they
are re-exported here so a driver needs one import.

The protocol is complete: the server builds a store with
``storage.factory.open_store`` and uses nothing of it beyond ``Store`` — lifecycle
(``open`` / ``close`` / ``abort``), failure reporting (``failure``), the admin side
(``admin``) and the figures ``/metrics`` shows (``figures``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from uuid_utils import UUID

from sepp.domain.clock import Clock
from sepp.domain.outcomes import JobDependencies, JobOutcome
from sepp.domain.params import (
    DAMAGED_ROW,
    NO_FLOW,
    ExtendResult,
    FlowLimits,
    ReserveParams,
    SettleError,
    SettleKind,
    SettleParams,
    SettleResult,
    SkippedRow,
    SweepResult,
)
from sepp.domain.policy import PolicyLookup, PolicyTable, QueuePolicy
from sepp.domain.records import (
    Dedups,
    JobRecord,
    JobRow,
    NodeRecord,
    PeriodicRecord,
    PeriodicRun,
    QueueRecord,
    WorkerRecord,
)
from sepp.domain.states import FINISHED, State
from sepp.domain.workflows import WorkflowCancel, WorkflowNode, WorkflowSummary
from sepp.storage.admin import AdminStore
from sepp.storage.commit_stats import EMPTY, CommitHistograms
from sepp.storage.dependencies import DependsOn, OnFailure
from sepp.storage.errors import StoreFailed
from sepp.storage.search import CustomEntry
from sepp.storage.workflows import WorkflowClaim, WorkflowDedup

#: Longest payload ``Store.publish_events`` takes, UTF-8 bytes (PostgreSQL's NOTIFY takes
#: fewer than 8,000; the rest is room for the channel and framing).
EVENT_PAYLOAD_BYTES = 7_500

__all__ = [
    "DAMAGED_ROW",
    "EVENT_PAYLOAD_BYTES",
    "FINISHED",
    "NO_FLOW",
    "Dedups",
    "ExtendResult",
    "FlowLimits",
    "JobDependencies",
    "JobOutcome",
    "JobRecord",
    "JobRow",
    "NodeRecord",
    "PeriodicRecord",
    "PeriodicRun",
    "PolicyLookup",
    "PolicyTable",
    "QueuePolicy",
    "QueueRecord",
    "ReserveParams",
    "SettleError",
    "SettleKind",
    "SettleParams",
    "SettleResult",
    "SkippedRow",
    "State",
    "Store",
    "StoreFigures",
    "SweepResult",
    "WorkerRecord",
]


@dataclass(frozen=True, slots=True)
class StoreFigures:
    """A store's figures for ``/metrics`` at one moment.

    ``commits``: write transactions committed since ``open()`` (a counter:
    ``sepp_commits_total``); ``backlog``: jobs submitted to the writer and not committed yet
    (a gauge: ``sepp_commit_backlog_jobs``; the same number as ``Store.backlog``);
    ``commit_stats``: the cumulative commit histograms (``sepp.storage.commit_stats``:
    ``sepp_commit_batch_jobs``, ``sepp_commit_duration_seconds``).
    """

    commits: int
    backlog: int
    commit_stats: CommitHistograms = EMPTY


class Store(Protocol):
    """Domain-level storage operations; implemented by ``SQLiteStore`` (one node, embedded)
    and ``PostgresStore`` (any number of nodes on one database), both held to the same
    conformance suite.

    Every method may raise ``StoreClosed`` after ``close()`` began, and ``StoreError``
    for a failure of the backend.
    """

    async def open(self) -> None:
        """Create or migrate the schema and start the writer."""

    async def close(self) -> None:
        """Finish pending writes (each acked write is committed), then release everything.
        Idempotent."""

    def abort(self) -> None:
        """Forced stop (a second stop signal; the process exits right after): end the
        writer at once without waiting — a crash for the writes in flight, while nothing
        acknowledged is lost. Quick and synchronous (it runs in a signal handler)."""

    async def failure(self) -> StoreFailed:
        """Wait until the store can no longer write and will not recover in this process
        (the SQLite writer process died); returns the error for the server to stop with
        (exit non-zero, a supervisor restarts it). Never returns for a store that cannot
        fail that way; cancel the wait when the server stops."""

    @property
    def admin(self) -> AdminStore:
        """The admin operations on the same data (``sepp.storage.admin.AdminStore``)."""

    def figures(self) -> StoreFigures:
        """Figures for ``/metrics`` (``StoreFigures``); cheap, no I/O."""

    async def ping(self) -> None:
        """Prove the store can answer right now (readiness): a trivial read and,
        where writes run elsewhere (the SQLite writer thread or process), a round trip to
        the writer that writes nothing and counts as no commit. Returns when both answered.

        Raises ``StoreClosed`` after ``close()`` began and ``StoreError`` (``StoreFailed``,
        ``StoreUnavailable``) when the store cannot answer. Does not bound its own time:
        the caller does (``sepp.server.readiness``: 1 s); a cancelled ping leaves nothing
        behind that matters (a writer answer that comes later is dropped)."""

    @property
    def shared(self) -> bool:
        """True when other sepp nodes may use the same data at the same time (PostgreSQL):
        the server then keeps its queue cache in step with the store and heartbeats its node
        (``sepp.server.cluster``). False for SQLite (one process owns the folder)."""

    def subscribe(self, ready: Callable[[str | None], None], queues_changed: Callable[[], None]) -> None:
        """Cluster events from the other nodes: ``ready(queue)`` when another
        node made jobs of ``queue`` READY (an enqueue, a promotion, a retry, a reclaim, a
        redrive), ``ready(None)`` when such events may have been missed (wake every waiter);
        ``queues_changed()`` when another node created, changed or deleted a queue. Called on
        the event loop. A store that is not ``shared`` never calls them."""

    def subscribe_events(self, on_payload: Callable[[str], None]) -> None:
        """Live job events from the other nodes: ``on_payload(text)`` for each text another
        node (or this one: the caller tells them apart) sent with ``publish_events``, on the
        event loop. At-most-once: a payload sent while the connection was away is lost. A
        store that is not ``shared`` never calls it."""

    async def publish_events(self, payload: str) -> None:
        """Send ``payload`` (text of at most ``EVENT_PAYLOAD_BYTES`` UTF-8 bytes) to every
        node's ``subscribe_events`` callbacks (PostgreSQL: ``pg_notify`` on the schema's
        events channel, outside any job transaction). Nothing for a store that is not
        ``shared``. Raises ``StoreError`` when it could not be sent (the caller drops it)."""

    def on_sql_enqueued(self, enqueued: Callable[[Mapping[str, int], Sequence[tuple[int, int]]], None]) -> None:
        """Call ``enqueued(counts, blocks)`` (on the event loop) each time this node hears
        that jobs were committed through the SQL functions ``enqueue`` / ``enqueue_batch``
        (docs/enqueue-in-transaction.md), a few ms after that commit: ``counts`` the jobs
        stored per queue (deduplicated ones not counted), ``blocks`` the (first seq, seqs)
        ranges holding them, for ``sql_enqueued_jobs``. Every node hears every such commit;
        one made while this node's listener connection was away is not heard here
        (at-most-once). A store that is not ``shared`` never calls it."""

    async def sql_enqueued_jobs(self, blocks: Sequence[tuple[int, int]]) -> list[tuple[bytes, str, str, int, int]]:
        """The jobs stored in ``blocks`` (as ``on_sql_enqueued`` names them), in seq order:
        (16-byte id, queue, job type, run_at µs, enqueued_at µs) each; a job deleted since is
        not listed. Raises ``StoreError``. A store that is not ``shared`` has none."""

    async def heartbeat(self, node: NodeRecord) -> None:
        """Record that ``node`` is alive (insert or update its row; ``last_seen``)."""

    async def nodes(self) -> list[NodeRecord]:
        """Every node that recorded a heartbeat, by name (a node that stopped keeps its row
        with its last ``last_seen``; the UI shows how long ago that was)."""

    async def report_workers(self, node: str, workers: Sequence[WorkerRecord], forget_before: int) -> None:
        """Replace what ``node`` last reported of its workers with ``workers`` (the
        Workers page), and forget every worker row — of any node — whose ``last_seen`` is
        before ``forget_before`` (µs UTC). Sent with each heartbeat."""

    async def workers(self) -> list[WorkerRecord]:
        """Every worker row the nodes reported (one per worker and node), by worker then node."""

    @property
    def backlog(self) -> int:
        """Jobs submitted to the writer and not yet committed (for load shedding; read on
        every enqueue, so a plain attribute read). PostgreSQL: also the jobs whose ids
        ``new_job_ids`` is waiting for."""

    async def new_job_ids(self, n: int) -> list[UUID]:
        """``n`` ids for jobs about to be enqueued (UUIDv7, time-ordered; the engine makes
        every job's id here). SQLite: random UUIDv7s. PostgreSQL: ids that carry a seq this
        node took from the database (``sepp.storage.postgres.ids``), so that a job is found
        by its primary key; may wait for a block of seqs and then raise ``StoreUnavailable``
        like a write. ``enqueue`` accepts any 16-byte id, also one not made here."""

    async def enqueue(self, rows: Sequence[JobRow], dedup_until: Sequence[int], now: int,
                      new_queues: Sequence[QueueRecord] = (), custom: Sequence[CustomEntry] = (),
                      depends_on: DependsOn | None = None, on_failure: OnFailure | None = None) -> Dedups:
        """Store ``rows`` in one commit. A row with an idempotency key is deduplicated
        against unexpired keys (``now``) and earlier rows of the same call; otherwise it
        claims its key until ``dedup_until[i]`` (µs). ``new_queues`` are created (if
        absent) in the same commit, and so are the custom-index entries ``custom`` (job id,
        key, value text; ``sepp.storage.search``) of the rows stored (a
        deduplicated row's are dropped). Returns the deduplicated rows (others were stored).

        ``depends_on`` (row index → the 16-byte ids that row depends on, distinct, in order;
        ``storage.dependencies``): a row with a dependency not COMPLETED is stored DEFERRED
        and released — READY, or SCHEDULED for a run_at after the release — in the commit
        that completes its last one. Raises ``DependencyMissing`` (nothing stored) when an id
        is no stored job. A deduplicated row's dependencies are not recorded. ``on_failure``
        (row index → ``dependencies.CANCEL`` / ``RUN`` / ``WAIT``, absent: cancel) is what the
        row does when a dependency is dead-lettered or cancelled, then or later
        (docs/workflows.md "When a dependency fails")."""

    async def enqueue_workflow(self, rows: Sequence[JobRow], dedup_until: Sequence[int], now: int,
                               new_queues: Sequence[QueueRecord], custom: Sequence[CustomEntry],
                               depends_on: DependsOn, on_failure: OnFailure,
                               claim: WorkflowClaim) -> WorkflowDedup | None:
        """Store the jobs of one workflow (``rows``, none with an idempotency key) in one
        commit, or nothing (``sepp.storage.workflows``). Each gets ``claim.workflow_id``.
        ``depends_on`` (row index → 16-byte ids, in topological order of the rows) may name
        rows of this call as well as stored jobs; the rows are stored DEFERRED and released
        as for ``enqueue``. ``claim.key`` (when not "") is held until ``claim.dedup_until``
        (µs): a live claim returns the earlier workflow (``WorkflowDedup``: its id and its
        jobs' ids in node order) and stores nothing; otherwise returns None. Raises
        ``DependencyMissing`` (nothing stored) when an id is neither a row of the call nor a
        stored job."""

    async def workflow_jobs(self, workflow_id: bytes) -> list[bytes]:
        """The 16-byte ids of the stored jobs of workflow ``workflow_id`` (16 bytes), in
        enqueue order; [] for no such workflow (or once its jobs are purged)."""

    # -- the admin side of workflows (``sepp.storage.workflow_admin``; docs/workflows.md
    # "Seeing and steering a workflow"): read from the jobs that carry the workflow's id.

    async def list_workflows(self, before: bytes | None, limit: int) -> list[WorkflowSummary]:
        """Up to ``limit`` workflows whose 16-byte id sorts below ``before`` (None: from the
        highest), highest id first — newest first, the ids being UUIDv7 — each with its stored
        jobs per state and their earliest ``enqueued_at`` (µs UTC). One index seek per workflow
        listed, then its jobs through the workflow index. A workflow whose jobs are all purged
        is not listed."""

    async def workflow_nodes(self, workflow_id: bytes) -> list[WorkflowNode]:
        """The stored jobs of workflow ``workflow_id`` in enqueue order (= the order of the
        ``EnqueueWorkflow`` call's nodes), each with the ids it depends on, its reason and for
        a DEAD_LETTERED job its last error; [] for no such workflow."""

    async def cancel_workflow(self, workflow_id: bytes, now: int, policy: PolicyLookup,
                              reason: str) -> WorkflowCancel:
        """Cancel every node of the workflow that is not finished, in one commit, as
        ``AdminStore.cancel`` does per job: SCHEDULED, READY and DEFERRED → CANCELLED
        (``finished_at = now`` µs, kept for the queue's dead-letter retention, ``reason``),
        RESERVED → ``cancel_requested`` set (the worker learns it on ExtendLease); finished
        nodes are left alone. Each node is cancelled before the nodes it depends on, so every
        one names ``reason``; jobs outside the workflow that depend on a cancelled node follow
        their failure policy. ``WorkflowCancel.found`` is False when no job carries the id."""

    async def load_queues(self) -> list[QueueRecord]:
        """Every persisted queue."""

    async def upsert_queue(self, queue: QueueRecord, now: int) -> None:
        """Create or replace a queue's settings/flags (the whole row, as given)."""

    async def change_queue(self, name: str, change: Callable[[QueueRecord | None], QueueRecord],
                           now: int) -> QueueRecord:
        """Change queue ``name``'s row from what is stored, not from a copy the caller holds
        (several nodes share one database: a node's cache may miss another node's change
        for a while). ``change(stored)`` gets the row as stored right now — ``None`` when
        there is none — and returns the row to write (its ``name`` is ignored: ``name`` is
        written); the row is replaced by it (``updated_at = now``; a new row also gets
        ``created_at = now``) and returned. Nothing commits between the read ``change``
        saw and the write, so a change made meanwhile by any node is never undone: two
        callers changing different settings of one queue at once both take effect.

        ``change`` runs on the event loop and must be pure and quick: it may be called
        more than once for one call (when another node created or changed the row first,
        or when the transaction is run again). Whatever it raises reaches the caller
        unchanged, and nothing is written. Other failures: ``StoreError`` as for any write.

        PostgreSQL: one transaction through the committer, the row read ``FOR UPDATE``
        (other nodes' changes of that queue wait for it). SQLite: one writer, so no lock;
        the write is conditional on the row being still what ``change`` saw and is tried
        again with the new row otherwise (docs/decisions.md "Queue changes merge over the
        stored row")."""

    async def reserve(self, params: ReserveParams) -> list[JobRecord]:
        """Promote due scheduled jobs, then move up to ``max_jobs`` READY jobs to RESERVED.
        The promotion takes every queue's due jobs: the queues it made jobs READY in are
        told to ``on_promoted``'s callback once the call committed."""

    def on_promoted(self, promoted: Callable[[SweepResult, int], None]) -> None:
        """Call ``promoted(result, now)`` (on the event loop, after the call committed) when a
        ``reserve``'s own promotion made jobs READY — also of queues that call does not
        reserve from: ``result.queues`` the queues, ``result.promoted_run_at`` and
        ``result.promoted_jobs`` each job as a sweep's ``promote_due`` names them (a row
        promoted one by one after its batch statement failed is left to the sweep's
        report), ``now`` the time (µs UTC) the promotion took as now. This node's long polls
        of those queues must be woken, and the promotions reported (the lag metric, the
        live ``promoted`` events): the promotion sweep then finds nothing left to promote
        (other nodes hear of the wake-up through ``subscribe``). Replaces the previous
        callback; none by default."""

    async def reserve_damaged(self, leases: Sequence[tuple[bytes, bytes]], now: int) -> int:
        """Dead-letter leased jobs (job id, lease id) whose rows could not be delivered (a
        damaged column: ``storage.rows``) with reason ``DAMAGED_ROW``; their history is not
        touched and they are kept until an admin deletes or requeues them (no purge time).
        Returns how many were still held by those leases."""

    async def settle(self, items: Sequence[SettleParams], policy: PolicyLookup) -> list[SettleResult]:
        """Apply acks/nacks in one commit; one result per item, in order (``transitions.settle``
        decides each). An ack's ``result`` is written by the statement that completes its job
        (never a write of its own); one longer than its queue's ``max_result_bytes``
        (``policy``) is not applied: the attempt is retried instead (``transitions.result_refused``).

        An ack's ``children`` (``domain.children.Children``) are stored by the same commit,
        before the statement that completes its job: in the job's workflow (it takes
        ``children.workflow_id`` when it has none), and the job's dependents made to wait for
        ``children.targets`` instead of it. When a child's ``depends_on`` names no stored job,
        nothing of them is written and the attempt is failed instead
        (``domain.children.refused_children``: retried, the reason in its history). A refused
        or repeated ack stores none."""

    async def extend(self, job_id: bytes, lease_id: bytes, now: int, expires_at: int,
                     clock: Clock | None = None, progress: str | None = None) -> ExtendResult:
        """Move a live lease's expiry to ``expires_at`` (µs UTC). The lease is judged live or
        not at ``now`` (when the extension was asked). With a ``clock`` the expiry is
        measured from when the store writes it: ``expires_at`` plus the time since ``now``
        read from ``clock`` in that transaction (``params.granted_expiry``; picklable, as
        ``ReserveParams.clock``), and the result carries that expiry. ``progress`` (JSON
        text, checked by the caller) replaces the job's stored progress in the same write;
        a refused extension writes neither."""

    async def promote_due(self, now: int, limit: int) -> SweepResult:
        """SCHEDULED jobs with run_at ≤ now → READY (at most ``limit``).

        Every sweep (this, ``reclaim_expired``, ``prune``) isolates failures: a row it cannot
        process is left as it is and reported in ``SweepResult.skipped``; every other due row
        is still handled in the same pass. Only a failure of the store as a whole
        (``StoreError``) fails the pass."""

    async def next_due(self) -> int | None:
        """The earliest run_at of a SCHEDULED job, or None."""

    async def reclaim_expired(self, now: int, limit: int, policy: PolicyLookup) -> SweepResult:
        """RESERVED jobs whose lease ran out → READY, or DEAD_LETTERED (LEASE_EXPIRED) on the last attempt."""

    async def prune(self, now: int, limit: int) -> SweepResult:
        """Delete finished jobs past their retention, expired idempotency keys and expired
        workflow keys (at most ``limit`` of each); ``count`` is the rows deleted."""

    async def get_job(self, job_id: bytes) -> JobRecord | None:
        """One job by id, or None."""

    # -- waiting for jobs (``sepp.server.waiting``): the stored state, and hints between nodes.

    async def job_outcomes(self, job_ids: Sequence[bytes]) -> list[JobOutcome]:
        """What a wait reads of each stored job among ``job_ids`` (at most ``MAX_WAIT_JOBS``;
        in no particular order, an id of no job left out): ``JobOutcome`` — state, queue,
        attempts, and for a finished job its history, reason and result. One read, off the
        writer."""

    async def job_dependencies(self, job_id: bytes) -> JobDependencies | None:
        """The state, current lease id and stored ``depends_on`` ids of the job ``job_id``
        (``JobDependencies``), None for no stored job: what a handler's read of its
        dependencies' outcomes checks and then reads (``job_outcomes``). One read, off the writer."""

    def on_finished(self, finished: Callable[[Sequence[bytes] | None, Sequence[str]], None]) -> None:
        """Call ``finished(ids, queues)`` (on the event loop) when another node says jobs
        finished: their ids, and queues where jobs finished whose ids it did not send (a
        reclaim pass); ``finished(None, ())`` when such news may have been missed (look
        again). A store that is not ``shared`` never calls it."""

    @property
    def others_waiting(self) -> bool:
        """Whether another node said lately that callers wait on it (``waiting``): only then
        is ``finished`` worth calling. Always False when not ``shared``."""

    def finished(self, job_ids: Sequence[bytes], queues: Sequence[str]) -> None:
        """Tell the other nodes' waiters that ``job_ids`` finished (and jobs of ``queues``
        whose ids are not known), after the commit that finished them: in the background,
        batched, and only while ``others_waiting``. Quick and synchronous; never raises."""

    def waiting(self) -> None:
        """Tell the other nodes that callers wait on this one (so they send ``finished``);
        repeated while they wait. Quick and synchronous (sent in the background); never raises."""

    # -- periodic schedules: one row per schedule, shared by every node.

    async def load_periodic(self, names: Sequence[str] | None = None) -> list[PeriodicRecord]:
        """The schedules named in ``names`` (every one when None), by name; a name with no
        row is left out."""

    async def put_periodic(self, name: str, definition: str, source: str, now: int) -> bool:
        """Create schedule ``name`` (not paused, ``active_since = now``) or replace the
        definition and source of an existing one, keeping its state (paused, last tick, last
        run). Returns True when it was created."""

    async def set_periodic_paused(self, name: str, paused: bool, now: int) -> PeriodicRecord | None:
        """Pause or resume ``name``; a resume that changes the flag sets ``active_since = now``
        (ticks of the pause are never caught up). The row after the change, or None when
        there is no such schedule."""

    async def delete_periodic(self, name: str) -> bool:
        """Forget schedule ``name`` (the jobs it made stay). False when there was none."""

    async def record_periodic_runs(self, runs: Sequence[PeriodicRun]) -> None:
        """Record what runs did, in one transaction: for each run whose schedule still
        exists, ``last_run_at``, ``last_job_id`` and ``last_error`` — unless a later run is
        recorded already — and ``last_tick = max(last_tick, tick)`` for a tick's run (so
        several nodes recording the same tick, in any order, leave the same row)."""
