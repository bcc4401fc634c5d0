"""``Metrics``: the node's metrics, fed by the engine's events, read by ``/metrics``.

Subscribes to the engine events (``ServerParts.events``, ``sepp.server.events``); each subscriber does O(1) work
per event plus, where the metric is per job, a dictionary increment or a cheap histogram
observation per job (``exposition.Histogram``). Everything runs on the event loop. ``render``
writes the exposition (``exposition.Text``) from these figures, the store's
figures (commits, backlog, commit histograms), the sweeper's skipped rows, the queue
registry (paused) and the latest queue-gauge read (``gauges.GaugeSampler``) — which
``refresh_gauges`` fetches before each rendering.
"""

from __future__ import annotations

from bisect import bisect_left
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from operator import itemgetter
from typing import TYPE_CHECKING, Any

from sepp.domain.states import STATE_NAMES, State
from sepp.rejections import CodedRejection, code_name
from sepp.server.metrics import definitions as m
from sepp.server.metrics.exposition import Histogram, Text, label_value
from sepp.server.metrics.gauges import GaugeSampler
from sepp.server.queues import QueueState, no_consumer
from sepp.server.workers import last_reserves
from sepp.storage.admin import QueueGauges
from sepp.storage.base import Dedups, JobRow, SettleKind, SettleParams, SettleResult

if TYPE_CHECKING:
    from sepp.server.parts import ServerParts

_SCHEDULED, _READY = int(State.SCHEDULED), int(State.READY)
_COMPLETED, _DEAD = int(State.COMPLETED), int(State.DEAD_LETTERED)
_RETRY, _DEAD_LETTER, _RELEASE = SettleKind.RETRY, SettleKind.DEAD_LETTER, SettleKind.RELEASE
_ACK = SettleKind.ACK
#: Every state's label (``sepp_queue_jobs{state}``): the lowercase name sepp spells states with.
_STATES = [STATE_NAMES[int(s)] for s in State]
_queue_of = itemgetter(1)


class Metrics:
    """This node's metrics (see the module docstring). ``gauge_interval`` is
    ``metrics_gauge_interval`` (seconds; 0 = read the store at every scrape).

    ``auth_failures_from(source)`` wires ``sepp_auth_failures_total{reason}`` to a callable
    returning {reason: count}; ``auth_failure(reason)`` counts one here instead. Without
    either the family has no samples. ``sweep_skipped`` is ``Sweeper.skipped``."""

    def __init__(self, parts: ServerParts, *, gauge_interval: float = 15.0,
                 sweep_skipped: Callable[[], Mapping[str, int]] | None = None) -> None:
        self.parts = parts
        self._sweep_skipped = sweep_skipped
        self.enqueued: Counter[str] = Counter()
        self.enqueued_sql: Counter[str] = Counter()
        self.deduplicated: Counter[str] = Counter()
        self.rejections: Counter[tuple[str, str]] = Counter()
        self.completed: Counter[str] = Counter()
        self.retried: Counter[str] = Counter()
        self.dead_lettered: Counter[tuple[str, str]] = Counter()
        self.leases_expired: Counter[str] = Counter()
        self.overloaded = 0
        self._auth: Counter[str] = Counter()
        self._auth_source: Callable[[], Mapping[str, int]] | None = None
        self.rpc: dict[tuple[str, str], Histogram] = {}
        self.promotion_lag = Histogram(m.PROMOTION_LAG.buckets)
        self.runtime: dict[str, Histogram] = {}
        # Real time (like the sampler's sleeps), not the server's clock (parts.clock).
        self.sampler = GaugeSampler(self._read_gauges, gauge_interval)
        self._gauges: tuple[QueueGauges, float] | None = None
        #: The job counters ``refresh_gauges`` took for the next ``render`` (None: take them then).
        self._frozen: tuple[dict[Any, float], ...] | None = None
        ev = parts.events
        self._unsubscribe = [ev.stored.subscribe(self._on_stored), ev.rejected.subscribe(self._on_rejected),
                             ev.overloaded.subscribe(self._on_overloaded), ev.settled.subscribe(self._on_settled),
                             ev.leases_expired.subscribe(self._on_leases_expired),
                             ev.promoted.subscribe(self._on_promoted),
                             ev.sql_enqueued.subscribe(self.enqueued_sql.update)]

    # ------------------------------------------------------------------ wiring

    def auth_failures_from(self, source: Callable[[], Mapping[str, int]]) -> None:
        """Feed ``sepp_auth_failures_total{reason}`` from ``source()`` ({reason: count since
        start}), read at each scrape (the auth layer's own tally)."""
        self._auth_source = source

    def auth_failure(self, reason: str) -> None:
        """Count one refused call with ``reason`` (when the auth layer has no tally of its own)."""
        self._auth[reason] += 1

    def observe_rpc(self, method: str, code: str, seconds: float) -> None:
        """One finished gRPC call (``rpc_metrics.RpcMetrics``)."""
        h = self.rpc.get((method, code))
        if h is None:
            h = self.rpc[(method, code)] = Histogram(m.RPC_DURATION.buckets)
        h.observe(seconds)

    def close(self) -> None:
        """Unsubscribe from the engine's events (the sampler is stopped by ``stop``)."""
        for unsubscribe in self._unsubscribe:
            unsubscribe()

    async def stop(self) -> None:
        """Unsubscribe and stop the background gauge reads."""
        self.close()
        await self.sampler.stop()

    async def _read_gauges(self) -> QueueGauges:
        """The sampler's read: the store's ``queue_gauges`` plus the other nodes' latest
        Reserve per queue from the worker rows (``QueueGauges.last_reserve``; this node's own
        are taken fresh from memory at each rendering), for ``sepp_queue_no_consumer``."""
        parts = self.parts
        gauges = await parts.store.admin.queue_gauges()
        node = parts.node
        others = last_reserves(r for r in await parts.store.workers() if r.node != node)
        return replace(gauges, last_reserve=others)

    # ------------------------------------------------------------------ events

    def _on_stored(self, rows: Sequence[JobRow], dedups: Dedups) -> None:
        if len(rows) == 1:
            self.enqueued[rows[0][1]] += 1
        else:
            self.enqueued.update(map(_queue_of, rows))
        if dedups:
            for i in dedups:
                queue = rows[i][1]
                self.enqueued[queue] -= 1
                self.deduplicated[queue] += 1

    def _on_rejected(self, rejections: Sequence[tuple[str, CodedRejection]]) -> None:
        known = self.parts.queues.get
        name = code_name
        for queue, rejection in rejections:
            label = queue if known(queue) is not None else ""
            try:
                code = name(rejection.code)
            except ValueError:
                code = str(rejection.code)
            self.rejections[(label, code)] += 1

    def _on_overloaded(self, jobs: int) -> None:
        self.overloaded += jobs

    def _on_settled(self, items: Sequence[SettleParams], results: Sequence[SettleResult]) -> None:
        # Per job on the settle path: kept to tuple unpacking, one dict increment and an
        # inlined histogram observation (~0.3 µs a job; benchmarks in docs/benchmarks.md).
        runtime = self.runtime
        completed = self.completed
        last: str | None = None
        counts: list[int] = []
        bounds: tuple[float, ...] = ()
        h: Histogram | None = None
        for p, r in zip(items, results, strict=False):
            error, state, run_at, _attempt, queue, started, _type = r
            if error is not None:
                continue
            if state == _COMPLETED:
                if not run_at:  # a repeated ack: counted the first time
                    continue
                completed[queue] += 1
            else:
                kind = p[2]
                if kind is _RELEASE:
                    continue  # given back undelivered: no attempt ran
                if state == _DEAD:
                    reason = m.NACK_DEAD_LETTER if kind is _DEAD_LETTER else m.ATTEMPTS_EXHAUSTED
                    self.dead_lettered[(queue, reason)] += 1
                elif (kind is _RETRY or kind is _ACK) and (state == _SCHEDULED or state == _READY):
                    self.retried[queue] += 1  # (an ack lands here only when its result was refused)
            if started:
                if queue != last:
                    h = runtime.get(queue)
                    if h is None:
                        h = runtime[queue] = Histogram(m.JOB_RUNTIME.buckets)
                    counts, bounds, last = h.counts, h.bounds, queue
                seconds = (p[3] - started) / 1e6
                if seconds < 0:  # another node's clock ahead of this one
                    seconds = 0.0
                counts[bisect_left(bounds, seconds)] += 1
                h.total += seconds  # type: ignore[union-attr]

    def _on_leases_expired(self, expired: Mapping[str, int], dead: Mapping[str, int]) -> None:
        for queue, n in expired.items():
            self.leases_expired[queue] += n
        for queue, n in dead.items():
            self.dead_lettered[(queue, m.LEASE_EXPIRED)] += n

    def _on_promoted(self, now: int, run_ats: Sequence[int]) -> None:
        observe = self.promotion_lag.observe
        for run_at in run_ats:
            observe(max(0, now - run_at) / 1e6)

    # ------------------------------------------------------------------ scrape

    async def refresh_gauges(self) -> None:
        """Fetch the queue gauges to show in the next ``render`` (``GaugeSampler.current``).

        The job counters of that rendering are taken here, before the read: a scrape never
        shows a counter that moved after its gauge read began (with ``metrics_gauge_interval
        = 0`` a reclaimed lease counted in ``sepp_leases_expired_total`` is then also out of
        ``sepp_queue_jobs{state="reserved"}``; with a background read the gauges are
        ``sepp_queue_gauges_age_seconds`` old anyway)."""
        counters = self._job_counters()
        gauges = await self.sampler.current()
        self._gauges, self._frozen = gauges, counters  # one pair: concurrent scrapes each see a consistent one

    def _job_counters(self) -> tuple[dict[Any, float], ...]:
        """Copies of the job counters as they are now (the order ``render`` writes them)."""
        return (dict(self.enqueued), dict(self.enqueued_sql), dict(self.deduplicated), dict(self.rejections),
                dict(self.completed), dict(self.retried), dict(self.dead_lettered), dict(self.leases_expired),
                {(): self.overloaded})

    def render(self) -> bytes:
        """Every metric of ``definitions.ALL`` in the Prometheus text format (``exposition``)."""
        out = Text()
        frozen, self._frozen = self._frozen, None
        (enqueued, enqueued_sql, dedup, rejections, completed, retried, dead, expired,
         overloaded) = frozen or self._job_counters()
        out.samples(m.JOBS_ENQUEUED, (((q,), n) for q, n in enqueued.items()))
        out.samples(m.JOBS_ENQUEUED_SQL, (((q,), n) for q, n in enqueued_sql.items()))
        out.samples(m.JOBS_DEDUPLICATED, (((q,), n) for q, n in dedup.items()))
        out.samples(m.ENQUEUE_REJECTIONS, rejections.items())
        out.samples(m.JOBS_COMPLETED, (((q,), n) for q, n in completed.items()))
        out.samples(m.JOBS_RETRIED, (((q,), n) for q, n in retried.items()))
        out.samples(m.JOBS_DEAD_LETTERED, dead.items())
        out.samples(m.LEASES_EXPIRED, (((q,), n) for q, n in expired.items()))
        out.samples(m.JOBS_OVERLOADED, overloaded.items())
        auth = dict(self._auth)
        if self._auth_source is not None:
            for reason, n in self._auth_source().items():
                auth[reason] = auth.get(reason, 0) + n
        out.samples(m.AUTH_FAILURES, (((r,), n) for r, n in auth.items()))
        out.samples(m.SCRAPE_ERRORS, (((r,), n) for r, n in self.sampler.errors.items()))
        figures = self.parts.store.figures()
        out.samples(m.COMMITS, [((), figures.commits)])
        if self._sweep_skipped is not None:
            out.samples(m.SWEEP_SKIPPED, (((p,), n) for p, n in self._sweep_skipped().items()))
        out.samples(m.COMMIT_BACKLOG, [((), figures.backlog)])
        registry = self.parts.queues.all()
        out.samples(m.QUEUES, [((), len(registry))])
        self._queue_gauges(out, registry)
        stats = figures.commit_stats
        out.family(m.COMMIT_BATCH_JOBS)
        out.histogram(m.COMMIT_BATCH_JOBS, (), stats.jobs_counts, stats.jobs_sum)
        out.family(m.COMMIT_DURATION)
        out.histogram(m.COMMIT_DURATION, (), stats.seconds_counts, stats.seconds_sum)
        out.histograms(m.RPC_DURATION, self.rpc.items())
        out.histograms(m.PROMOTION_LAG, [((), self.promotion_lag)])
        out.histograms(m.JOB_RUNTIME, (((q,), h) for q, h in self.runtime.items()))
        return out.body()

    def _queue_gauges(self, out: Text, registry: Sequence[QueueState]) -> None:
        names = {q.name for q in registry}
        snapshot = self._gauges
        if snapshot is not None:
            gauges, age = snapshot
            now = self.parts.clock.now()
            every = sorted(names | gauges.counts.keys())
            out.family(m.QUEUE_JOBS)
            name = m.QUEUE_JOBS.name
            for queue in every:
                counts = gauges.counts.get(queue)
                q = label_value(queue)
                for label in _STATES:
                    out.sample(name, f'{{queue="{q}",state="{label}"}}',
                               getattr(counts, label) if counts is not None else 0)
            out.family(m.QUEUE_OLDEST_READY_AGE)
            name = m.QUEUE_OLDEST_READY_AGE.name
            for queue in every:
                run_at = gauges.oldest_ready.get(queue)
                out.sample(name, f'{{queue="{label_value(queue)}"}}',
                           max(0, now - run_at) / 1e6 if run_at is not None else 0)
            out.family(m.QUEUE_OLDEST_DEFERRED_AGE)
            name = m.QUEUE_OLDEST_DEFERRED_AGE.name
            for queue in every:
                at = gauges.oldest_deferred.get(queue)
                out.sample(name, f'{{queue="{label_value(queue)}"}}', max(0, now - at) / 1e6 if at is not None else 0)
            out.samples(m.QUEUE_GAUGES_AGE, [((), age)])
        out.samples(m.QUEUE_PAUSED, (((q.name,), 1 if q.paused else 0) for q in registry))
        if snapshot is not None:
            self._no_consumer(out, snapshot[0], registry)

    def _no_consumer(self, out: Text, gauges: QueueGauges, registry: Sequence[QueueState]) -> None:
        """``sepp_queue_no_consumer{queue}`` of every known queue: the rule of the
        UI and ``sepp queues list`` (``queues.no_consumer``) applied to the sampled counts and
        oldest READY job, the other nodes' Reserves as sampled and this node's as of now."""
        parts = self.parts
        last = dict(gauges.last_reserve)
        for queue, at in last_reserves(parts.workers.snapshot(parts.node)).items():
            if at > last.get(queue, 0):
                last[queue] = at
        now = parts.clock.now()
        flags = []
        for q in registry:
            counts = gauges.counts.get(q.name)
            flagged = no_consumer(q.paused, counts.ready if counts is not None else 0, gauges.oldest_ready.get(q.name),
                                  last.get(q.name), q.settings.consumer_timeout, now)
            flags.append(((q.name,), 1 if flagged else 0))
        out.samples(m.QUEUE_NO_CONSUMER, flags)
