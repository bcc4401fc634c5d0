"""AdminEngine: queue administration, job inspection, cancel, redrive and stats.

Transport-agnostic like ``JobEngine``: the gRPC ``AdminService`` and the web UI both
call it in-process. Errors are ``sepp.server.errors`` exceptions (``NotFound``,
``InvalidRequest``) plus ``StateConflict`` below (FAILED_PRECONDITION on the wire).

Throughput stats (documented choice): enqueues, completions and dead letters are
counted in memory per (queue, minute) by a ``ThroughputCounter`` (``admin.throughput``)
subscribed to the engine events ``stored`` / ``finished`` (``ServerParts.events``), and folded into the
``queue_throughput`` table every ``flush_interval`` seconds and at stop, so no job write
carries a statistics write (a crash loses at most that many seconds of the series). Reads
merge the table with the counts not flushed yet. Page tokens: ``admin.cursor``; settings
patches: ``admin.settings``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from sepp.api.v1 import common_pb2 as pb
from sepp.domain.ids import job_id_bytes, job_id_text
from sepp.domain.states import STATE_NAMES
from sepp.limits import QueueSettings
from sepp.quoting import clip, quote
from sepp.rejections import Reason, RejectionCode
from sepp.server.admin.cursor import decode_cursor, encode_cursor
from sepp.server.admin.held_back import HeldBack, held_back
from sepp.server.admin.settings import merge_settings
from sepp.server.admin.throughput import MINUTE_US, ThroughputCounter
from sepp.server.admin.type_figures import DAY_MINUTES, HOUR_MINUTES, TypeFigures, TypeRollup, figures_of, merge_reads
from sepp.server.admin.workers import WorkerView, merge_workers
from sepp.server.errors import EngineError, InvalidRequest, NotFound, QueueLimitReached
from sepp.server.parts import ServerParts
from sepp.server.queues import QueueState, no_consumer, stored_settings
from sepp.server.workers import last_reserves
from sepp.storage.admin import (
    AdminStore,
    DeadFilter,
    JobQuery,
    JobSummary,
    MinuteRow,
    Outcome,
    StateCounts,
)
from sepp.storage.base import JobRecord, QueueRecord, State
from sepp.storage.errors import StoreError

if TYPE_CHECKING:
    from sepp.server.periodic.admin import PeriodicAdmin

log = logging.getLogger("sepp.admin")
#: Queue declared, changed, paused, resumed, purged, deleted (significant events).
qlog = logging.getLogger("sepp.queues")


def _queue_event(event: str, name: str, what: str, **fields: Any) -> None:
    """One ``sepp.queues`` line for an admin change of queue ``name`` (API or UI)."""
    qlog.info("queue %s %s (admin)", quote(name), what, extra={"event": event, "queue": name, "source": "admin",
                                                                **fields})

_MINUTE = MINUTE_US
#: Minutes of throughput shown (the last hour) and kept in the table (a day).
WINDOW_MINUTES = 60
KEEP_MINUTES = 24 * 60
#: Page sizes of ListJobs.
DEFAULT_PAGE, MAX_PAGE = 50, 1000
#: Rows one purge / redrive transaction touches at most (keeps the single writer responsive).
CHUNK = 2000
#: Purge without states: the waiting backlog.
DEFAULT_PURGE = (int(State.SCHEDULED), int(State.READY))
ALL_STATES = tuple(int(s) for s in State)


def not_empty_message(name: str, counts: StateCounts) -> str:
    """The refusal of DeleteQueue without ``force`` (seen by ``sepp queues delete`` and
    ``AdminClient.delete_queue`` callers): what the queue holds, per state, and the two ways
    out that work — ``force``, or a purge of exactly those states (a purge without states
    takes only SCHEDULED and READY, so "purge it first" alone was not enough)."""
    held = [(label, n) for label, n in ((s.name.lower(), getattr(counts, s.name.lower())) for s in State) if n]
    states = " ".join(f"--state {label}" for label, _ in held)
    return (f"queue {quote(name)} holds {counts.total} job(s) ({', '.join(f'{n} {label}' for label, n in held)}); "
            f"delete it with force (sepp queues delete {name} --force; the API's DeleteQueueRequest.force) or "
            f"purge those states first (sepp queues purge {name} {states}; a purge without --state deletes only "
            "scheduled and ready jobs)")


class StateConflict(EngineError):
    """The target's state does not allow the operation (FAILED_PRECONDITION).

    ``reason`` is ``JOB_STATE`` or ``QUEUE_NOT_EMPTY``; ``metadata`` goes into the ErrorInfo.
    """

    def __init__(self, reason: Reason, message: str, metadata: Mapping[str, str] | None = None) -> None:
        super().__init__(message)
        self.reason = reason
        self.metadata = dict(metadata or {})


def state_name(state: int) -> str:
    """``READY``, ``DEAD_LETTERED``, …; ``UNKNOWN`` for anything else: the UPPERCASE spelling
    of ``StateConflict`` messages and their ``state`` metadata (wire strings) and of the
    admin UI. Read from the one name table (``sepp.domain.states.STATE_NAMES``); not
    ``domain.states.state_name`` itself, which spells ``dead_lettered`` and an unknown
    number as its digits."""
    name = STATE_NAMES.get(state)
    return "UNKNOWN" if name is None else name.upper()


# ---------------------------------------------------------------------- views


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


@dataclass(slots=True)
class _CountsCache:
    value: dict[str, StateCounts] = field(default_factory=dict)
    expires: float = 0.0


# ---------------------------------------------------------------------- engine


#: Seconds a stopping server waits for the last throughput counts to be written.
FINAL_FLUSH_TIMEOUT = 10.0


class AdminEngine:
    """Admin operations over the node's ``ServerParts`` (queues, notifier, store, events) and
    an ``AdminStore``.

    ``start()`` hooks the throughput counter into the engine's events and starts the flush loop;
    ``stop()`` must run before the store closes (it writes the last counts). Every time it
    reads (stats window, key expiry, cancel/redrive time, the counts cache) comes from
    ``parts.clock``; the flush loop sleeps in real time.
    """

    def __init__(self, parts: ServerParts, store: AdminStore, *, flush_interval: float = 5.0) -> None:
        self.parts = parts
        self.store = store
        self.clock = parts.clock
        self._clock_now = parts.clock.now
        self.counter = ThroughputCounter(parts.clock)
        #: Job-type figures counted in memory, flushed with the throughput.
        self.types = TypeRollup(parts.clock)
        from sepp.server.admin.bulk import BulkActions  # bulk imports this module (StateConflict)

        #: Bulk cancel / requeue / delete with progress.
        self.bulk = BulkActions(self)
        self.flush_interval = flush_interval
        self._task: asyncio.Task[None] | None = None
        self._counts = _CountsCache()
        #: The periodic schedules' admin side, set by the composition root
        #: (``sepp.server.app``); None in engine-only tests.
        self.periodic: PeriodicAdmin | None = None

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        """Count enqueues and flush them periodically."""
        self.parts.events.stored.subscribe(self.counter.on_stored)
        self.parts.events.finished.subscribe(self.counter.on_finished)
        self.parts.events.settled.subscribe(self.types.on_settled)
        self.parts.events.reclaimed.subscribe(self.types.on_reclaimed)
        self._task = asyncio.create_task(self._flush_loop(), name="sepp-admin-stats")

    async def stop(self) -> None:
        """Stop the bulk runs and the loop, and write the last counts, waiting at most ``FINAL_FLUSH_TIMEOUT``
        seconds for that write (a hung writer must not hold up the shutdown). Idempotent."""
        timeout = FINAL_FLUSH_TIMEOUT
        await self.bulk.stop()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
            try:
                await asyncio.wait_for(self.flush(), timeout)
            except TimeoutError:
                log.warning("the last throughput counts were not written within %.0f s", timeout)
            except StoreError as exc:  # the store is gone (its writer died): one line, no traceback
                log.warning("the last throughput counts were not written: %s: %s", type(exc).__name__,
                            clip(str(exc), 200))
            except Exception:
                log.warning("writing the last throughput counts failed", exc_info=True)

    async def _flush_loop(self) -> None:
        while True:
            await asyncio.sleep(self.flush_interval)
            try:
                await self.flush()
            except StoreError as exc:  # e.g. PostgreSQL restarting: kept, written with the next flush
                log.warning("throughput counts not written yet: %s", exc)
            except Exception:
                log.warning("flushing throughput counts failed", exc_info=True)

    async def flush(self) -> None:
        """Write pending throughput counts and job-type figures, and prune minutes older than
        a day. A failed write keeps its counts for the next flush."""
        counts = self.counter.take()
        keep_after = self._clock_now() // _MINUTE - KEEP_MINUTES
        try:
            await self.store.add_counts(counts, keep_after)
        except BaseException:
            self.counter.restore(counts)
            raise
        minutes, buckets = self.types.take()
        minute = self._clock_now() // _MINUTE
        try:
            # Minute rows serve the last hour (kept two), hour rows the last 24 hours (kept 25).
            await self.store.add_type_figures(minutes, buckets, minute - 2 * HOUR_MINUTES,
                                              minute - minute % HOUR_MINUTES - DAY_MINUTES)
        except BaseException:
            self.types.restore(minutes, buckets)
            raise
        self.types.prune(keep_after)

    # ------------------------------------------------------------------ queues

    def queue(self, name: str) -> QueueState:
        """The queue, or ``NotFound`` (QUEUE_NOT_FOUND)."""
        q = self.parts.queues.get(name)
        if q is None:
            raise NotFound(f"queue {quote(name)} does not exist", Reason.QUEUE_NOT_FOUND)
        return q

    def queues(self) -> list[QueueState]:
        """Every queue, sorted by name."""
        return self.parts.queues.all()

    def _check_name(self, name: str) -> None:
        rejection = self.parts.validator.validate(pb.EnqueueRequest(queue=name, job_type="x"), 0)
        if rejection is not None and rejection.code == RejectionCode.QUEUE_NAME_INVALID.to_wire():
            raise InvalidRequest(f"QueueNameInvalid: {rejection.message}", "name")

    async def _change(self, q: QueueState, patch: Mapping[str, Any] | None = None, paths: Sequence[str] = (), *,
                      paused: bool | None = None, declared: bool | None = None, create: bool = False) -> bool:
        """Change queue ``q`` over its STORED row, not over this node's copy (which may not
        have taken another node's change yet): ``patch`` (the fields ``paths`` name, as
        ``merge_settings``) merged over the stored settings and validated as a whole, and
        the flags given set, in one write (``Store.change_queue``); then ``q`` takes the row
        as written, other nodes' changes included.

        Returns whether the row was created (there was none). Raises ``InvalidRequest`` as
        ``merge_settings`` (nothing written) and ``NotFound`` when the row is gone though
        this node had it stored (deleted on another node) — unless ``create`` (a declare):
        then it is created anew from the server defaults."""
        lim, labels = self.parts.limits, self.parts.limits.max_encoding_bytes
        taken: list[QueueSettings] = []
        absent: list[bool] = []

        def change(stored: QueueRecord | None) -> QueueRecord:
            absent[:] = [stored is None]
            if stored is None:
                if q.persisted and not create:
                    raise NotFound(f"queue {quote(q.name)} does not exist (deleted on another node)",
                                   Reason.QUEUE_NOT_FOUND)
                if q.persisted:  # deleted on another node, declared again: a new queue
                    base, was_paused, was_declared = self.parts.queues.defaults, False, False
                else:
                    base, was_paused, was_declared = q.settings, q.paused, q.declared  # on demand, not stored yet
            else:
                base = stored_settings(stored, labels, quiet=True)
                was_paused, was_declared = stored.paused, stored.declared
            settings = base if patch is None else merge_settings(base, patch, paths, lim.max_message_bytes, labels)
            taken[:] = [settings]
            return QueueRecord(q.name, settings.model_dump_json(), was_paused if paused is None else paused,
                               was_declared if declared is None else declared)

        self.parts.queues.touch()  # a cluster refresh reading meanwhile must not undo it
        rec = await self.parts.store.change_queue(q.name, change, self._clock_now())
        if q.settings != taken[0]:
            q.apply(taken[0])
        q.paused, q.declared, q.persisted = rec.paused, rec.declared, True
        self.parts.queues.touch()
        return absent[0]

    async def declare_queue(self, name: str, patch: Mapping[str, Any] | None = None,
                            paths: Sequence[str] = ()) -> tuple[QueueState, bool]:
        """Create ``name`` (server defaults + ``patch``) or mark it declared (applying ``patch``
        over its stored settings when given, as ``update_queue``). Returns the queue and
        whether it was created.

        Raises ``InvalidRequest`` for a bad name or setting, ``QueueLimitReached`` when a new
        queue would exceed ``limits.max_queues``.
        """
        self._check_name(name)
        registry = self.parts.queues
        current = registry.get(name)
        if current is None:
            if registry.full():
                raise QueueLimitReached(name, registry.max_queues, registry.count())
            # Written over the stored row (``_change``): another node may have created the
            # queue since this node loaded its queues; its keys and pause are kept then.
            q = QueueState(name, registry.defaults)
            created = await self._change(q, patch, paths, declared=True)
            raced = registry.get(name)  # an enqueue may have created it on demand meanwhile
            if raced is not None:
                raced.apply(q.settings)
                raced.paused, raced.declared, raced.persisted = q.paused, True, True
                _queue_event("queue_declared", name, "declared", settings=list(paths))
                return raced, False
            registry.put(q)
            _queue_event("queue_declared", name, "declared", settings=list(paths))
            return q, created
        await self._change(current, patch, paths, declared=True, create=True)
        if patch is not None:
            self.parts.notifier.ready(name)  # a flow limit raised or lifted frees capacity now
        _queue_event("queue_declared", name, "declared" + (f", changed: {', '.join(paths)}" if paths else ""),
                     settings=list(paths))
        return current, False

    async def update_queue(self, name: str, patch: Mapping[str, Any], paths: Sequence[str]) -> QueueState:
        """Apply settings to an existing queue at once (validation and reserve use them next
        call; this node's long-polling reservers of the queue are woken to try again, so a
        raised or lifted flow limit hands out jobs at once).

        The fields ``paths`` name are merged over the queue's stored settings inside the
        write (``_change``), so a change another node made to other fields meanwhile is kept
        even when this node has not taken it yet; the result is validated as a whole
        (``InvalidRequest``, nothing written) and this node's copy takes the row written."""
        q = self.queue(name)
        await self._change(q, patch, paths)
        self.parts.notifier.ready(name)  # a flow limit raised or lifted frees capacity now
        _queue_event("queue_changed", name, f"changed: {', '.join(paths) or 'settings'}", settings=list(paths))
        return q

    async def set_paused(self, name: str, paused: bool) -> QueueState:
        """Pause (Reserve gives nothing) or resume (waiting reservers are woken); the
        stored settings are kept as they are (``_change``)."""
        q = self.queue(name)
        await self._change(q, paused=paused)
        _queue_event("queue_paused" if paused else "queue_resumed", name, "paused" if paused else "resumed")
        if not paused:
            self.parts.notifier.ready(name)
        return q

    async def purge(self, name: str, states: Iterable[int] = ()) -> int:
        """Delete the queue's jobs in ``states`` (default SCHEDULED + READY); returns how many."""
        self.queue(name)
        wanted = tuple(dict.fromkeys(states)) or DEFAULT_PURGE
        for s in wanted:
            if s not in ALL_STATES:
                raise InvalidRequest(f"unknown job state {s}", "states")
        total = 0
        while True:
            n = await self.store.purge(name, wanted, CHUNK)
            total += n
            if n < CHUNK:
                break
        self._counts.expires = 0.0
        if total:
            self._freed(name, wanted)
        _queue_event("queue_purged", name, f"purged: {total} job(s) deleted", count=total)
        return total

    async def delete_queue(self, name: str, force: bool = False) -> int:
        """Forget a queue; with ``force`` its jobs go too. Returns the jobs deleted.

        Raises ``StateConflict`` (QUEUE_NOT_EMPTY) for a non-empty queue without ``force``.
        """
        self.queue(name)
        deleted = 0
        for _ in range(5):
            if force:
                deleted += await self.purge(name, ALL_STATES)
            if await self.store.delete_queue(name):
                self.parts.queues.remove(name)
                self.counter.forget(name)
                self.types.forget(name)
                self._counts.expires = 0.0
                _queue_event("queue_deleted", name, f"deleted with {deleted} job(s)", count=deleted)
                return deleted
            if not force:
                counts = (await self.store.state_counts(name)).get(name, StateCounts())
                if not counts.total:  # emptied since the delete looked: try it again
                    continue
                raise StateConflict(Reason.QUEUE_NOT_EMPTY, not_empty_message(name, counts),
                                    {"jobs": str(counts.total)})
        raise StateConflict(Reason.QUEUE_NOT_EMPTY, f"queue {quote(name)} keeps receiving jobs; pause producers first")

    # ------------------------------------------------------------------ jobs

    @staticmethod
    def _job_id(text: str) -> bytes:
        raw = job_id_bytes(text)
        if raw is None:
            raise InvalidRequest(f"job_id {quote(text)} is not a UUID", "job_id")
        return raw

    async def get_job(self, job_id: str) -> JobRecord:
        """The full job, or ``NotFound`` (JOB_NOT_FOUND)."""
        rec = await self.parts.store.get_job(self._job_id(job_id))
        if rec is None:
            raise NotFound(f"job {clip(job_id, 64)} does not exist", Reason.JOB_NOT_FOUND)
        return rec

    async def list_jobs(self, query: JobQuery, page_token: str = "", page_size: int = 0) -> JobListing:
        """One page of jobs matching ``query`` (order: see ``sepp.storage.sqlite.admin``).

        Raises ``InvalidRequest`` for a bad page size, state or token.
        """
        if page_size < 0 or page_size > MAX_PAGE:
            raise InvalidRequest(f"page_size must be between 1 and {MAX_PAGE} (0 = {DEFAULT_PAGE}; got {page_size})",
                                 "page_size", 0 if page_size < 0 else MAX_PAGE, page_size)
        if query.state is not None and query.state not in ALL_STATES:
            raise InvalidRequest(f"unknown job state {query.state}", "state")
        after = decode_cursor(query, page_token)
        try:
            page = await self.store.list_jobs(query, after, page_size or DEFAULT_PAGE,
                                              self.parts.config.search_scan_rows)
        except ValueError as exc:
            raise InvalidRequest(f"page_token is malformed: {clip(exc)}", "page_token") from None
        return JobListing(page.jobs, encode_cursor(query, page.next_key) if page.next_key is not None else "",
                          page.scan_limited, page.examined)

    async def find_by_key(self, queue: str, key: str) -> tuple[str, int, JobRecord | None]:
        """(job id, key expiry µs, the job or None if deleted) for a live idempotency key.

        Raises ``NotFound`` (IDEMPOTENCY_KEY_NOT_FOUND) when the key is not claimed (or expired).
        """
        hit = await self.store.find_idempotency(queue, key)
        if hit is None or hit[1] <= self._clock_now():
            raise NotFound(f"no live idempotency key {quote(key)} in queue {quote(queue)}",
                           Reason.IDEMPOTENCY_KEY_NOT_FOUND)
        job = await self.parts.store.get_job(hit[0])
        return job_id_text(hit[0]), hit[1], job

    async def cancel(self, job_id: str, reason: str = "") -> JobRecord:
        """SCHEDULED/READY → CANCELLED; RESERVED → cancel requested (the worker sees it on
        ExtendLease). Returns the job as read after. Raises ``NotFound`` or ``StateConflict``
        (JOB_STATE)."""
        await self.cancel_outcome(job_id, reason)
        return await self.get_job(job_id)

    async def cancel_outcome(self, job_id: str, reason: str = "") -> Outcome:
        """``cancel`` without the read after: ``Outcome.DONE`` (now CANCELLED),
        ``CANCEL_REQUESTED`` (it was RESERVED) or ``UNCHANGED`` (CANCELLED already) — what the
        cancel itself did, which a read after it may no longer show (a worker can complete a
        job between the two). Raises ``NotFound`` or ``StateConflict`` (JOB_STATE)."""
        raw = self._job_id(job_id)
        # A NUL cannot be stored as text by PostgreSQL: the free-form reason keeps U+FFFD instead.
        text = reason[:1024].replace("\x00", "\ufffd") if reason else ""
        result = await self.store.cancel(raw, self._clock_now(), self.parts.queues.policies(), text)
        if result.outcome is Outcome.NOT_FOUND:
            raise NotFound(f"job {clip(job_id, 64)} does not exist", Reason.JOB_NOT_FOUND)
        if result.outcome is Outcome.WRONG_STATE:
            raise StateConflict(Reason.JOB_STATE,
                                f"job {clip(job_id, 64)} is {state_name(result.state)}; only SCHEDULED, "
                                "READY and RESERVED jobs can be cancelled", {"state": state_name(result.state)})
        self._counts.expires = 0.0
        return result.outcome

    async def requeue(self, job_id: str) -> JobRecord:
        """Redrive a DEAD_LETTERED or CANCELLED job. Raises ``NotFound`` or ``StateConflict``."""
        result = await self.store.requeue(self._job_id(job_id), self._clock_now())
        if result.outcome is Outcome.NOT_FOUND:
            raise NotFound(f"job {clip(job_id, 64)} does not exist", Reason.JOB_NOT_FOUND)
        if result.outcome is Outcome.WRONG_STATE:
            raise StateConflict(Reason.JOB_STATE, f"job {clip(job_id, 64)} is {state_name(result.state)}; only "
                                "DEAD_LETTERED and CANCELLED jobs can be requeued", {"state": state_name(result.state)})
        self.parts.notifier.ready(result.queue)
        self._counts.expires = 0.0
        return await self.get_job(job_id)

    async def requeue_dead(self, where: DeadFilter, dry_run: bool = False, max_jobs: int = 0) -> tuple[int, int]:
        """Bulk redrive: (matched, requeued). Only jobs dead-lettered before the call started
        are taken, so a job that fails again meanwhile is not redriven twice."""
        if max_jobs < 0:
            raise InvalidRequest(f"max_jobs must not be negative (0 = every match; got {max_jobs})", "max_jobs", 0,
                                 max_jobs)
        now = self._clock_now()
        before = now + 1 if where.before is None else min(where.before, now + 1)
        snapshot = DeadFilter(where.queue, where.job_type, where.reason_prefix, where.after, before)
        matched = await self.store.count_dead(snapshot)
        if dry_run or matched == 0:
            return matched, 0
        goal = matched if max_jobs == 0 else min(max_jobs, matched)
        done = 0
        while done < goal:
            n, queues = await self.store.requeue_dead(snapshot, self._clock_now(), min(CHUNK, goal - done))
            for name in queues:
                self.parts.notifier.ready(name)
            done += n
            if n == 0:
                break
        self._counts.expires = 0.0
        return matched, done

    async def delete_job(self, job_id: str, state: int | None = None) -> None:
        """Delete one job in any state (a RESERVED one of a flow-limited queue wakes this
        node's long-polls of it: its slot is free); with ``state`` only while the job is in
        that state (a ticked row, a bulk run: ``AdminStore.delete_job``). Raises
        ``NotFound``, or ``StateConflict`` (JOB_STATE) for a job in another state than
        ``state``."""
        result = await self.store.delete_job(self._job_id(job_id), state)
        if result.outcome is Outcome.NOT_FOUND:
            raise NotFound(f"job {clip(job_id, 64)} does not exist", Reason.JOB_NOT_FOUND)
        if result.outcome is Outcome.WRONG_STATE:
            raise StateConflict(Reason.JOB_STATE, f"job {clip(job_id, 64)} is {state_name(result.state)}, no longer "
                                f"{state_name(state or 0)}; not deleted", {"state": state_name(result.state)})
        self._counts.expires = 0.0
        self._freed(result.queue, (result.state,))

    def _freed(self, name: str, states: Iterable[int]) -> None:
        """Wake this node's long-polls of a flow-limited queue ``name`` when RESERVED jobs of it
        were deleted (their slots are free)."""
        q = self.parts.queues.get(name)
        if q is not None and q.flow is not None and int(State.RESERVED) in states:
            self.parts.notifier.ready(name)

    # ------------------------------------------------------------------ workers

    async def workers(self) -> list[WorkerView]:
        """Every worker that called within the last hour, on any node (the Workers
        page; ``sepp.server.admin.workers``): the nodes' reports, with this node's own rows
        taken fresh from memory, and the jobs each holds RESERVED now. Raises ``StoreError``."""
        parts = self.parts
        node = parts.node
        rows = [r for r in await parts.store.workers() if r.node != node]
        rows += parts.workers.snapshot(node)
        in_flight = await self.store.reserved_by_worker()
        return merge_workers(rows, in_flight, parts.queues, self._clock_now())

    # ------------------------------------------------------------------ stats

    async def type_figures(self, name: str) -> list[TypeFigures]:
        """The job-type figures of queue ``name`` over the last hour and the last 24 hours
        (``sepp.server.admin.type_figures``): the store's rows (every node's
        flushed counts) plus this node's counts not flushed yet. The busiest
        ``type_figures.MAX_TYPES`` job types first, the rest folded into ``(other)``. Windows:
        the hour is the current minute and the 59 before it; the day the current hour (UTC,
        on the minute) and the 23 before it, so 23 to 24 hours. Raises ``NotFound``,
        ``StoreError``."""
        self.queue(name)
        minute = self._clock_now() // _MINUTE
        hour = minute - HOUR_MINUTES + 1
        day = minute - minute % HOUR_MINUTES - DAY_MINUTES + HOUR_MINUTES
        stored = await self.store.type_figures(name, day, hour)
        return figures_of(merge_reads(stored, self.types.pending_read(name, day, hour)))

    async def _all_counts(self) -> dict[str, StateCounts]:
        """Counts of every queue; cached for 5× the time the count took (≤ 10 s), so a
        dashboard polling a huge database costs the readers at most ~1/6 of their time."""
        cache = self._counts
        monotonic = self.clock.monotonic
        if monotonic() < cache.expires:
            return cache.value
        started = monotonic()
        cache.value = await self.store.state_counts(None)
        took = monotonic() - started
        cache.expires = monotonic() + min(10.0, 5 * took)
        return cache.value

    async def state_totals(self, queue: str | None = None) -> StateCounts:
        """Jobs per state of ``queue`` (read now), or summed over every queue (None; the
        dashboard's cached counts, at most a few seconds old). For the UI's state tabs and
        a search's "of ~N jobs". Raises ``StoreError``."""
        if queue is not None:
            return (await self.store.state_counts(queue)).get(queue, StateCounts())
        per_queue = (await self._all_counts()).values()
        return StateCounts(*(sum(getattr(c, f) for c in per_queue) for f in StateCounts.__dataclass_fields__))

    async def stats(self, names: Sequence[str] = (), minutes: int = WINDOW_MINUTES) -> list[QueueStatsView]:
        """Stats of ``names`` (every queue when empty), in the order given / by name; a name
        given twice is answered once (so a request repeating one name 200,000 times costs one
        queue's stats, not 200,000). ``throughput`` covers the last ``minutes``
        minutes (1 … ``KEEP_MINUTES``, the day the table keeps).

        Raises ``NotFound`` for an unknown name.
        """
        minutes = max(1, min(minutes, KEEP_MINUTES))
        queues = [self.queue(n) for n in dict.fromkeys(names)] if names else self.queues()
        if names and len(queues) <= 4:
            counts: dict[str, StateCounts] = {}
            for q in queues:
                counts.update(await self.store.state_counts(q.name))
        else:
            counts = await self._all_counts()
        now = self._clock_now()
        this_minute = now // _MINUTE
        first = this_minute - minutes + 1
        series: dict[str, dict[int, list[int]]] = {}
        for row in await self.store.throughput(first):
            series.setdefault(row.queue, {})[row.minute] = [row.enqueued, row.completed, row.dead_lettered]
        for (queue, minute, column), n in self.counter.pending.items():
            if minute >= first:
                series.setdefault(queue, {}).setdefault(minute, [0, 0, 0])[column] += n
        last = await self._last_reserves()
        out = []
        for q in queues:
            oldest = await self.store.oldest_ready(q.name) if counts.get(q.name, StateCounts()).ready else None
            per = series.get(q.name, {})
            rows = [MinuteRow(q.name, m, *per.get(m, (0, 0, 0))) for m in range(first, this_minute + 1)]
            c = counts.get(q.name, StateCounts())
            held = None
            if q.flow is not None:
                held = held_back(q.flow, c.ready, c.reserved, await self.store.flow_read(q.name, q.flow), now)
            out.append(QueueStatsView(q.name, q.paused, c, oldest, rows, now, last.get(q.name),
                                      q.settings.consumer_timeout, held))
        return out

    async def _last_reserves(self) -> dict[str, int]:
        """Queue → the latest Reserve of it by any worker (µs UTC), from the worker rows every
        node reports (this node's fresh from memory): what "no consumer" is judged by
        . Another node's Reserves show with its report's delay (its heartbeat)."""
        parts = self.parts
        node = parts.node
        rows = [r for r in await parts.store.workers() if r.node != node]
        rows += parts.workers.snapshot(node)
        return last_reserves(rows)
