"""What the admin's dashboards read: jobs per state (cached for the dashboards), the
throughput per queue and minute, the job-type figures and the workers — and the in-memory
counts behind the throughput and the figures, flushed to the store.

Throughput stats (documented choice): enqueues, completions and dead letters are
counted in memory per (queue, minute) by a ``ThroughputCounter`` (``admin.throughput``)
subscribed to the engine events ``stored`` / ``finished``, and folded into the
``queue_throughput`` table every ``flush_interval`` seconds and at stop, so no job write
carries a statistics write (a crash loses at most that many seconds of the series). Reads
merge the table with the counts not flushed yet.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field

from sepp.domain.admin import MinuteRow, StateCounts
from sepp.quoting import clip
from sepp.server.admin.checks import existing_queue
from sepp.server.admin.held_back import held_back
from sepp.server.admin.throughput import MINUTE_US, ThroughputCounter
from sepp.server.admin.type_figures import DAY_MINUTES, HOUR_MINUTES, TypeFigures, TypeRollup, figures_of, merge_reads
from sepp.server.admin.views import QueueStatsView
from sepp.server.admin.workers import WorkerView, merge_workers
from sepp.server.parts import ServerParts
from sepp.server.workers import last_reserves
from sepp.storage.admin import AdminStore
from sepp.storage.errors import StoreError

log = logging.getLogger("sepp.admin")

_MINUTE = MINUTE_US
#: Minutes of throughput shown (the last hour) and kept in the table (a day).
WINDOW_MINUTES = 60
KEEP_MINUTES = 24 * 60
#: Seconds a stopping server waits for the last throughput counts to be written.
FINAL_FLUSH_TIMEOUT = 10.0


@dataclass(slots=True)
class _CountsCache:
    value: dict[str, StateCounts] = field(default_factory=dict)
    expires: float = 0.0


class AdminStats:
    """The dashboards' reads and the in-memory counts over the node's ``ServerParts`` (events,
    queues, store, workers and clock) and an ``AdminStore``.

    ``start()`` hooks the counters into the engine events and starts the flush loop (every
    ``flush_interval`` seconds, real time); ``stop()`` writes the last counts and must run
    before the store closes. Every other time it reads comes from ``parts.clock``.
    """

    def __init__(self, parts: ServerParts, store: AdminStore, *, flush_interval: float = 5.0) -> None:
        self.parts = parts
        self.store = store
        self.clock = parts.clock
        self._clock_now = parts.clock.now
        #: Enqueues, completions and dead letters per (queue, minute), flushed.
        self.counter = ThroughputCounter(parts.clock)
        #: Job-type figures counted in memory, flushed with the throughput.
        self.types = TypeRollup(parts.clock)
        self.flush_interval = flush_interval
        self._task: asyncio.Task[None] | None = None
        self._counts = _CountsCache()

    def changed(self) -> None:
        """Jobs changed state or went: the next read of every queue's counts reads anew."""
        self._counts.expires = 0.0

    def forget(self, name: str) -> None:
        """Drop what is counted in memory for queue ``name`` (deleted)."""
        self.counter.forget(name)
        self.types.forget(name)

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> None:
        """Count enqueues, completions and job-type figures, and flush them periodically."""
        events = self.parts.events
        events.stored.subscribe(self.counter.on_stored)
        events.finished.subscribe(self.counter.on_finished)
        events.settled.subscribe(self.types.on_settled)
        events.reclaimed.subscribe(self.types.on_reclaimed)
        self._task = asyncio.create_task(self._flush_loop(), name="sepp-admin-stats")

    async def stop(self) -> None:
        """Stop the loop and write the last counts, waiting at most ``FINAL_FLUSH_TIMEOUT``
        seconds for that write (a hung writer must not hold up the shutdown). Idempotent;
        never raises for a failed write (logged)."""
        timeout = FINAL_FLUSH_TIMEOUT
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
        a day. A failed write keeps its counts for the next flush (and raises)."""
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

    # ------------------------------------------------------------------ reads
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


    async def type_figures(self, name: str) -> list[TypeFigures]:
        """The job-type figures of queue ``name`` over the last hour and the last 24 hours
        (``sepp.server.admin.type_figures``): the store's rows (every node's
        flushed counts) plus this node's counts not flushed yet. The busiest
        ``type_figures.MAX_TYPES`` job types first, the rest folded into ``(other)``. Windows:
        the hour is the current minute and the 59 before it; the day the current hour (UTC,
        on the minute) and the 23 before it, so 23 to 24 hours. Raises ``NotFound``,
        ``StoreError``."""
        existing_queue(self.parts.queues, name)
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
        registry = self.parts.queues
        queues = [existing_queue(registry, n) for n in dict.fromkeys(names)] if names else registry.all()
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
        deferred = await self.store.oldest_deferred([q.name for q in queues
                                                     if counts.get(q.name, StateCounts()).deferred])
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
                                      q.settings.consumer_timeout, held, deferred.get(q.name)))
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
