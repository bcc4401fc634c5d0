"""AdminEngine: queue administration, job inspection, cancel, redrive and stats — one
handle over the admin's parts, each in its own module:

* ``jobs.JobAdmin`` — read, list, search, cancel, requeue, redrive and delete jobs;
* ``queue_changes.QueueChanges`` — declare, change, pause, purge and delete queues;
* ``stats.AdminStats`` — the dashboards' reads and the throughput / job-type counts in
  memory, flushed to the store;
* ``bulk.BulkActions`` — bulk cancel / requeue / delete over ``JobAdmin``;
* ``workflows.WorkflowAdmin`` — list, read and cancel workflows (``engine.workflows``).

Transport-agnostic like ``JobEngine``: the gRPC ``AdminService`` and the web UI both
call it in-process. Errors are ``sepp.server.errors`` exceptions (``NotFound``,
``InvalidRequest``) plus ``StateConflict`` (``admin.checks``; FAILED_PRECONDITION on the
wire). Page tokens: ``admin.cursor``; settings patches: ``admin.settings``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from sepp.domain.admin import Outcome, StateCounts
from sepp.domain.ids import job_id_text
from sepp.domain.listing import DeadFilter, JobQuery
from sepp.domain.records import JobRecord
from sepp.domain.states import State
from sepp.server.admin.bulk import BulkActions
from sepp.server.admin.checks import existing_queue
from sepp.server.admin.jobs import JobAdmin
from sepp.server.admin.queue_changes import QueueChanges
from sepp.server.admin.stats import WINDOW_MINUTES, AdminStats
from sepp.server.admin.type_figures import TypeFigures
from sepp.server.admin.views import JobListing, QueueStatsView
from sepp.server.admin.workers import WorkerView
from sepp.server.admin.workflows import WorkflowAdmin
from sepp.server.parts import ServerParts
from sepp.server.queues import QueueState
from sepp.storage.admin import AdminStore

if TYPE_CHECKING:
    from sepp.server.periodic.admin import PeriodicAdmin


class AdminEngine:
    """Admin operations over the node's ``ServerParts`` (queues, notifier, store, events) and
    an ``AdminStore``.

    ``start()`` hooks the throughput counter into the engine's events and starts the flush loop;
    ``stop()`` must run before the store closes (it writes the last counts). Every time it
    reads (stats window, key expiry, cancel/redrive time, the counts cache) comes from
    ``parts.clock``; the flush loop sleeps in real time. The operations are the parts'
    (``jobs``, ``queue_changes``, ``stats``, ``bulk``), handed on unchanged.
    """

    def __init__(self, parts: ServerParts, store: AdminStore, *, flush_interval: float = 5.0) -> None:
        self.parts = parts
        self.store = store
        self.clock = parts.clock
        #: The dashboards' reads and the counts in memory (``AdminStats``).
        self.statistics = AdminStats(parts, store, flush_interval=flush_interval)
        self.counter = self.statistics.counter
        #: Job-type figures counted in memory, flushed with the throughput.
        self.types = self.statistics.types
        #: The job operations.
        self.jobs = JobAdmin(parts, store, self.statistics.changed)
        #: The queue changes.
        self.queue_changes = QueueChanges(parts, store, self.jobs, self.statistics.forget,
                                          self.statistics.changed)
        #: Bulk cancel / requeue / delete with progress.
        self.bulk = BulkActions(self.jobs)
        #: The workflow operations (list, read, cancel whole).
        self.workflows = WorkflowAdmin(parts, self.statistics.changed)
        #: The periodic schedules' admin side, set by the composition root
        #: (``sepp.server.app``); None in engine-only tests.
        self.periodic: PeriodicAdmin | None = None

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        """Count enqueues and flush them periodically."""
        self.statistics.start()

    async def stop(self) -> None:
        """Stop the bulk runs and the flush loop, and write the last counts (``AdminStats.stop``).
        Idempotent."""
        await self.bulk.stop()
        await self.statistics.stop()

    async def flush(self) -> None:
        """Write pending throughput counts and job-type figures (``AdminStats.flush``)."""
        await self.statistics.flush()

    # ------------------------------------------------------------------ queues

    def queue(self, name: str) -> QueueState:
        """The queue, or ``NotFound`` (QUEUE_NOT_FOUND)."""
        return existing_queue(self.parts.queues, name)

    def queues(self) -> list[QueueState]:
        """Every queue, sorted by name."""
        return self.parts.queues.all()

    async def declare_queue(self, name: str, patch: Mapping[str, Any] | None = None,
                            paths: Sequence[str] = ()) -> tuple[QueueState, bool]:
        """``QueueChanges.declare_queue``: (the queue, whether it was created)."""
        return await self.queue_changes.declare_queue(name, patch, paths)

    async def update_queue(self, name: str, patch: Mapping[str, Any], paths: Sequence[str]) -> QueueState:
        """``QueueChanges.update_queue``: the queue with the fields ``paths`` name changed."""
        return await self.queue_changes.update_queue(name, patch, paths)

    async def set_paused(self, name: str, paused: bool) -> QueueState:
        """``QueueChanges.set_paused``: pause or resume the queue."""
        return await self.queue_changes.set_paused(name, paused)

    async def purge(self, name: str, states: Iterable[int] = ()) -> int:
        """``QueueChanges.purge``: the jobs deleted."""
        return await self.queue_changes.purge(name, states)

    async def delete_queue(self, name: str, force: bool = False) -> int:
        """``QueueChanges.delete_queue``: the jobs deleted with the queue."""
        return await self.queue_changes.delete_queue(name, force)

    # ------------------------------------------------------------------ jobs

    async def get_job(self, job_id: str) -> JobRecord:
        """``JobAdmin.get_job``: the full job."""
        return await self.jobs.get_job(job_id)

    async def waiting_on(self, rec: JobRecord) -> list[str]:
        """The ids (text) of the dependencies the job ``rec`` still waits for: those of a
        DEFERRED job (``AdminStore.waiting_on``), [] for a job in any other state (docs/workflows.md).
        Raises ``StoreError``."""
        if rec.state != int(State.DEFERRED):
            return []
        return [job_id_text(i) for i in await self.store.waiting_on(rec.seq)]

    async def list_jobs(self, query: JobQuery, page_token: str = "", page_size: int = 0) -> JobListing:
        """``JobAdmin.list_jobs``: one page of jobs matching ``query``."""
        return await self.jobs.list_jobs(query, page_token, page_size)

    async def find_by_key(self, queue: str, key: str) -> tuple[str, int, JobRecord | None]:
        """``JobAdmin.find_by_key``: (job id, key expiry µs, the job or None)."""
        return await self.jobs.find_by_key(queue, key)

    async def cancel(self, job_id: str, reason: str = "") -> JobRecord:
        """``JobAdmin.cancel``: the job as read after the cancel."""
        return await self.jobs.cancel(job_id, reason)

    async def cancel_outcome(self, job_id: str, reason: str = "") -> Outcome:
        """``JobAdmin.cancel_outcome``: what the cancel did."""
        return await self.jobs.cancel_outcome(job_id, reason)

    async def requeue(self, job_id: str, revive_dependents: bool = True) -> JobRecord:
        """``JobAdmin.requeue``: the job as read after the redrive (its dependents cancelled
        because it failed revived unless ``revive_dependents`` is False)."""
        return await self.jobs.requeue(job_id, revive_dependents)

    async def requeue_dead(self, where: DeadFilter, dry_run: bool = False, max_jobs: int = 0,
                           revive_dependents: bool = True) -> tuple[int, int]:
        """``JobAdmin.requeue_dead``: (matched, requeued)."""
        return await self.jobs.requeue_dead(where, dry_run, max_jobs, revive_dependents)

    async def delete_job(self, job_id: str, state: int | None = None) -> None:
        """``JobAdmin.delete_job``: delete one job (only while in ``state`` when given)."""
        await self.jobs.delete_job(job_id, state)

    # ------------------------------------------------------------------ workers and stats

    async def workers(self) -> list[WorkerView]:
        """``AdminStats.workers``: every worker that called within the last hour."""
        return await self.statistics.workers()

    async def type_figures(self, name: str) -> list[TypeFigures]:
        """``AdminStats.type_figures``: the job-type figures of queue ``name``."""
        return await self.statistics.type_figures(name)

    async def state_totals(self, queue: str | None = None) -> StateCounts:
        """``AdminStats.state_totals``: jobs per state of ``queue`` or of every queue."""
        return await self.statistics.state_totals(queue)

    async def stats(self, names: Sequence[str] = (), minutes: int = WINDOW_MINUTES) -> list[QueueStatsView]:
        """``AdminStats.stats``: the dashboards' view of ``names`` (every queue when empty)."""
        return await self.statistics.stats(names, minutes)
