"""Job-type figures: per queue and job type, completed, retried and
dead-lettered counts and run time p50 / p95 / max over the last hour and 24 hours.

How they are kept (documented choice, docs/decisions.md "Job-type figures"):

* ``TypeRollup`` subscribes to the engine's ``settled`` and ``reclaimed`` events and counts
  in memory per (queue, job_type, minute): completed, retried, dead-lettered, and for every
  attempt that ran to a settle its run time (lease → settle, the store's ``started_at`` to
  the settle's ``now``) into a log-bucket histogram plus the exact longest run. Every
  ``flush_interval`` seconds the admin engine hands the counts to the store, which *adds*
  them to its rows (``sepp.storage.type_figures``): on PostgreSQL every node adds its own,
  so a read is the cluster's; a crash loses at most one interval. Each count lands in a
  minute row and in an hour row: the last hour is read from 60 minute rows (the current
  minute and the 59 before it), the last 24 hours from 24 hour rows (the current hour and
  the 23 before it: 23 to 24 hours of history, in whole UTC hours).
* Run-time buckets are logarithmic (DDSketch-style): bucket ``i`` holds the runs of
  ``GAMMA**(i-1) < µs <= GAMMA**i`` with ``GAMMA = (1 + ALPHA) / (1 - ALPHA)``; its value
  is ``2 * GAMMA**i / (GAMMA + 1)``, within ``ALPHA`` (5 %) of every run time in it. A
  percentile is the nearest-rank one (the ``ceil(q * n)``-th smallest run) read from the
  buckets, so it is within 5 % of the exact nearest-rank value; the max is exact. Runs
  under 1 µs fall into bucket 0 (value 0).
* Cardinality is bounded: a node tracks at most ``MAX_TYPES`` job types per queue in a day;
  the runs of any other type count under ``OTHER``. A read folds everything past the
  ``MAX_TYPES`` busiest types into ``OTHER`` too (histograms merge exactly), so one answer
  holds at most ``MAX_TYPES + 1`` rows per queue whatever producers sent.

Cost on the settle path: a few comparisons, an increment and a list append per settled job
(the run times are bucketed at the next flush or read; measured in docs/benchmarks.md
"Job-type figures").
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from sepp.domain.clock import SYSTEM_CLOCK, Clock
from sepp.domain.params import SettleKind, SettleParams, SettleResult
from sepp.domain.states import State
from sepp.storage.type_figures import (
    HOUR_STEP,
    MINUTE_STEP,
    TypeFiguresRead,
    TypeMinute,
    TypeRunBucket,
    TypeTotals,
    read_of,
)

#: One minute in µs (the rows' time step).
MINUTE_US = 60_000_000
#: Minutes of the two windows shown: the last hour and the last 24 hours (the rows kept).
HOUR_MINUTES, DAY_MINUTES = 60, 24 * 60
#: Relative accuracy of a run-time percentile, and the bucket growth factor it implies.
ALPHA = 0.05
GAMMA = (1 + ALPHA) / (1 - ALPHA)
_INV_LN_GAMMA = 1.0 / math.log(GAMMA)
#: Most job types a node tracks per queue within a day; the rest count as ``OTHER``.
MAX_TYPES = 50
#: The row the job types beyond ``MAX_TYPES`` are folded into.
OTHER = "(other)"

_COMPLETED, _DEAD = int(State.COMPLETED), int(State.DEAD_LETTERED)
_SCHEDULED, _READY = int(State.SCHEDULED), int(State.READY)
_RETRY, _RELEASE, _ACK = SettleKind.RETRY, SettleKind.RELEASE, SettleKind.ACK
_log, _ceil = math.log, math.ceil


def bucket_of(us: float) -> int:
    """The run-time bucket of ``us`` microseconds: 0 for a run of at most 1 µs, else
    ``ceil(log_GAMMA(us))`` (≥ 1)."""
    return _ceil(_log(us) * _INV_LN_GAMMA) if us > 1 else 0


def bucket_value(bucket: int) -> float:
    """The value (µs) a bucket stands for: ``2 * GAMMA**i / (GAMMA + 1)``, within ``ALPHA``
    of any run time in it; 0 for bucket 0 (and below)."""
    return 0.0 if bucket <= 0 else 2.0 * GAMMA ** bucket / (GAMMA + 1.0)


def quantile(buckets: Mapping[int, int], q: float, run_max: int) -> float | None:
    """The nearest-rank ``q``-quantile (0 < q ≤ 1) of the runs counted in ``buckets``
    ({bucket: runs}), µs, clamped to the exact longest run ``run_max``; None without runs."""
    total = sum(n for n in buckets.values() if n > 0)
    if total <= 0:
        return None
    rank = max(1, math.ceil(q * total))
    seen = 0
    for bucket in sorted(buckets):
        n = buckets[bucket]
        if n <= 0:
            continue
        seen += n
        if seen >= rank:
            return min(bucket_value(bucket), float(run_max)) if run_max > 0 else bucket_value(bucket)
    return float(run_max)  # pragma: no cover - rank <= total


class _Acc:
    """One (queue, job_type, minute) being counted: completed, retried, dead-lettered; the run
    times (µs) of the settle path not bucketed yet (``times``: one append per job); and what
    ``fold`` made of them: timed runs, the longest run (µs) and {bucket: runs}."""

    __slots__ = ("buckets", "completed", "dead", "retried", "run_max", "runs", "times")

    def __init__(self) -> None:
        self.completed = self.retried = self.dead = self.runs = self.run_max = 0
        self.buckets: dict[int, int] = {}
        self.times: list[int] = []

    def fold(self) -> _Acc:
        """Bucket the pending run times (off the settle path: at a flush or a read)."""
        times = self.times
        if times:
            self.runs += len(times)
            self.run_max = max(self.run_max, max(times))
            inv = _INV_LN_GAMMA
            counts = Counter([_ceil(_log(us) * inv) if us > 1 else 0 for us in times])
            buckets = self.buckets
            for b, n in counts.items():
                buckets[b] = buckets.get(b, 0) + n
            times.clear()
        return self


_NO_ACC = _Acc()


class TypeRollup:
    """This node's job-type figures not yet written to the store (see the module docstring).

    ``on_settled`` / ``on_reclaimed`` are the engine events' subscribers (``ServerParts.events``); ``take``
    hands the pending counts over for a flush (``restore`` puts them back after a failed one);
    ``pending_read`` shows them to a read before they are flushed. ``clock`` dates the
    reclaimed counts (a settle is dated by its own ``now``)."""

    def __init__(self, clock: Clock = SYSTEM_CLOCK, max_types: int = MAX_TYPES) -> None:
        self._clock_now = clock.now
        self.max_types = max_types
        #: {(queue, job_type or OTHER, minute): counts}.
        self.pending: dict[tuple[str, str, int], _Acc] = {}
        #: {(queue, job_type as sent, minute): its entry of ``pending``} (the hot path's one lookup).
        self._index: dict[tuple[str, str, int], _Acc] = {}
        #: {queue: {job_type: the last minute it was seen}} (the cardinality bound).
        self._types: dict[str, dict[str, int]] = {}

    # ------------------------------------------------------------------ counting

    def _acc(self, key: tuple[str, str, int]) -> _Acc:
        """The entry of ``key`` (queue, job_type, minute): the job type's own, or ``OTHER``'s
        once the queue has ``max_types`` other types this day."""
        queue, job_type, minute = key
        seen = self._types.get(queue)
        if seen is None:
            seen = self._types[queue] = {}
        if job_type in seen or len(seen) < self.max_types:
            seen[job_type] = minute
            admitted = key
        else:
            admitted = (queue, OTHER, minute)
        acc = self.pending.get(admitted)
        if acc is None:
            acc = self.pending[admitted] = _Acc()
        self._index[key] = acc
        return acc

    def on_settled(self, items: Sequence[SettleParams], results: Sequence[SettleResult]) -> None:
        """``events.settled``: count each settled job by its new state, and time its attempt.

        A repeated ack (``run_at`` 0) and a release (no attempt ran) count nothing; an
        attempt's run time is ``item.now - result.started_at`` (0 when another node's clock
        is ahead). Per job: a few comparisons, an increment and a list append (a dict lookup
        when the queue, type or minute changes from the job before)."""
        index = self._index
        last_queue = last_type = None
        last_minute = -1
        acc = _NO_ACC
        for p, r in zip(items, results, strict=False):
            error, state, run_at, _attempt, queue, started, job_type = r
            if error is not None:
                continue
            kind = p[2]
            if kind is _RELEASE or (state == _COMPLETED and not run_at):
                continue
            now = p[3]
            minute = now // MINUTE_US
            # The jobs of one settle call mostly share queue, type and minute: compare, not hash.
            if minute != last_minute or job_type != last_type or queue != last_queue:
                key = (queue, job_type, minute)
                acc = index.get(key) or self._acc(key)
                last_queue, last_type, last_minute = queue, job_type, minute
            if state == _COMPLETED:
                acc.completed += 1
            elif state == _DEAD:
                acc.dead += 1
            elif (kind is _RETRY or kind is _ACK) and (state == _SCHEDULED or state == _READY):
                acc.retried += 1  # (an ack lands here only when its result was refused)
            if started:
                acc.times.append(now - started)   # bucketed by ``_Acc.fold``, off this path

    def on_reclaimed(self, counts: Mapping[tuple[str, str, int], int]) -> None:
        """``events.reclaimed``: an expired lease back to READY counts as retried, one
        dead-lettered on its last attempt as dead-lettered (no run time: it never settled)."""
        minute = self._clock_now() // MINUTE_US
        for (queue, job_type, state), n in counts.items():
            if state == _READY:
                self._acc((queue, job_type, minute)).retried += n
            elif state == _DEAD:
                self._acc((queue, job_type, minute)).dead += n

    # ------------------------------------------------------------------ flushing

    def take(self) -> tuple[list[TypeMinute], list[TypeRunBucket]]:
        """Hand over and forget the pending counts: the rows for
        ``AdminStore.add_type_figures``, each count in its minute row and its hour row."""
        pending, self.pending, self._index = self.pending, {}, {}
        for acc in pending.values():
            acc.fold()
        return _rows(pending)

    def restore(self, minutes: Iterable[TypeMinute], buckets: Iterable[TypeRunBucket]) -> None:
        """Put the rows of a failed flush back (added to what was counted meanwhile); the hour
        rows are left out, the next ``take`` makes them again from the minute rows."""
        pending = self.pending
        for m in minutes:
            if m.step != MINUTE_STEP:
                continue
            acc = _acc_of(pending, (m.queue, m.job_type, m.minute))
            acc.completed += m.completed
            acc.retried += m.retried
            acc.dead += m.dead_lettered
            acc.runs += m.runs
            acc.run_max = max(acc.run_max, m.run_max)
        for b in buckets:
            if b.step != MINUTE_STEP:
                continue
            acc = _acc_of(pending, (b.queue, b.job_type, b.minute))
            acc.buckets[b.bucket] = acc.buckets.get(b.bucket, 0) + b.n
        self._index = {}

    def prune(self, keep_after_minute: int) -> None:
        """Forget the job types not seen since ``keep_after_minute`` (so the bound counts a day)."""
        for queue in list(self._types):
            seen = self._types[queue]
            for job_type in [t for t, m in seen.items() if m < keep_after_minute]:
                del seen[job_type]
            if not seen:
                del self._types[queue]

    def forget(self, queue: str) -> None:
        """Drop a deleted queue's pending counts and known types."""
        for key in [k for k in self.pending if k[0] == queue]:
            del self.pending[key]
        self._index = {}
        self._types.pop(queue, None)

    def pending_read(self, queue: str, day_minute: int, hour_minute: int) -> TypeFiguresRead:
        """The pending counts of ``queue`` shaped like a store read (to add to one): the day
        from ``day_minute`` on, the hour from ``hour_minute`` on."""
        day: dict[str, TypeTotals] = {}
        hour: dict[str, TypeTotals] = {}
        day_runs: dict[tuple[str, int], int] = {}
        hour_runs: dict[tuple[str, int], int] = {}
        for (q, job_type, minute), acc in self.pending.items():
            if q != queue or minute < day_minute:
                continue
            acc.fold()
            this = TypeTotals(acc.completed, acc.retried, acc.dead, acc.runs, acc.run_max)
            for totals, runs, since in ((day, day_runs, day_minute), (hour, hour_runs, hour_minute)):
                if minute >= since:
                    totals[job_type] = _add(totals.get(job_type, TypeTotals()), this)
                    for b, n in acc.buckets.items():
                        runs[(job_type, b)] = runs.get((job_type, b), 0) + n
        return read_of(day, hour, day_runs, hour_runs)


def _acc_of(pending: dict[tuple[str, str, int], _Acc], key: tuple[str, str, int]) -> _Acc:
    """The counts of ``key`` (queue, job_type, minute) in ``pending``, made empty when new."""
    acc = pending.get(key)
    if acc is None:
        acc = pending[key] = _Acc()
    return acc


def _rows(pending: Mapping[tuple[str, str, int], _Acc]) -> tuple[list[TypeMinute], list[TypeRunBucket]]:
    """Minute rows of ``pending`` and the hour rows they add up to (one row per key)."""
    minutes: list[TypeMinute] = []
    buckets: list[TypeRunBucket] = []
    hours: dict[tuple[str, str, int], _Acc] = {}
    for (queue, job_type, minute), acc in pending.items():
        minutes.append(TypeMinute(queue, job_type, MINUTE_STEP, minute, acc.completed, acc.retried, acc.dead,
                                  acc.runs, acc.run_max))
        buckets.extend(TypeRunBucket(queue, job_type, MINUTE_STEP, minute, b, n) for b, n in acc.buckets.items()
                       if n)
        key = (queue, job_type, minute - minute % HOUR_STEP)
        hour = hours.get(key)
        if hour is None:
            hour = hours[key] = _Acc()
        hour.completed += acc.completed
        hour.retried += acc.retried
        hour.dead += acc.dead
        hour.runs += acc.runs
        hour.run_max = max(hour.run_max, acc.run_max)
        for b, n in acc.buckets.items():
            hour.buckets[b] = hour.buckets.get(b, 0) + n
    for (queue, job_type, first), acc in hours.items():
        minutes.append(TypeMinute(queue, job_type, HOUR_STEP, first, acc.completed, acc.retried, acc.dead,
                                  acc.runs, acc.run_max))
        buckets.extend(TypeRunBucket(queue, job_type, HOUR_STEP, first, b, n) for b, n in acc.buckets.items() if n)
    return minutes, buckets


def _add(a: TypeTotals, b: TypeTotals) -> TypeTotals:
    return TypeTotals(a.completed + b.completed, a.retried + b.retried, a.dead_lettered + b.dead_lettered,
                      a.runs + b.runs, max(a.run_max, b.run_max))


def merge_reads(a: TypeFiguresRead, b: TypeFiguresRead) -> TypeFiguresRead:
    """Two reads of one queue added up (a store read and the node's pending counts)."""
    totals = dict(a.totals)
    for job_type, (day, hour) in b.totals.items():
        old = totals.get(job_type)
        totals[job_type] = (day, hour) if old is None else (_add(old[0], day), _add(old[1], hour))
    hist = {t: dict(per) for t, per in a.buckets.items()}
    for job_type, per in b.buckets.items():
        mine = hist.setdefault(job_type, {})
        for bucket, (day_n, hour_n) in per.items():
            old_day, old_hour = mine.get(bucket, (0, 0))
            mine[bucket] = (old_day + day_n, old_hour + hour_n)
    return TypeFiguresRead(totals, hist)


# ---------------------------------------------------------------------- views


@dataclass(frozen=True, slots=True)
class WindowFigures:
    """One job type over one window: counts, timed runs, and run time p50 / p95 / max in
    seconds (None without a timed run). p50/p95 within ``ALPHA`` of the exact nearest-rank
    value; max exact."""

    completed: int
    retried: int
    dead_lettered: int
    runs: int
    p50: float | None
    p95: float | None
    max: float | None


@dataclass(frozen=True, slots=True)
class TypeFigures:
    """One job type of one queue: the last hour and the last 24 hours."""

    job_type: str
    hour: WindowFigures
    day: WindowFigures


def _window(t: TypeTotals, buckets: Mapping[int, int]) -> WindowFigures:
    p50 = quantile(buckets, 0.50, t.run_max) if t.runs else None
    p95 = quantile(buckets, 0.95, t.run_max) if t.runs else None
    return WindowFigures(t.completed, t.retried, t.dead_lettered, t.runs, None if p50 is None else p50 / 1e6,
                         None if p95 is None else p95 / 1e6, t.run_max / 1e6 if t.runs else None)


def figures_of(read: TypeFiguresRead, max_types: int = MAX_TYPES) -> list[TypeFigures]:
    """The views of one queue's read: the ``max_types`` busiest job types of the day (most
    settled jobs first, then by name), every other one folded into ``OTHER`` (last)."""
    def volume(job_type: str) -> int:
        day = read.totals[job_type][0]
        return day.completed + day.retried + day.dead_lettered + day.runs

    names = sorted(read.totals, key=lambda t: (-volume(t), t))
    keep = [t for t in names if t != OTHER][:max_types]
    folded = [t for t in names if t not in keep]
    totals: dict[str, tuple[TypeTotals, TypeTotals]] = {t: read.totals[t] for t in keep}
    hist: dict[str, dict[int, tuple[int, int]]] = {t: read.buckets.get(t, {}) for t in keep}
    if folded:
        day, hour = TypeTotals(), TypeTotals()
        other: dict[int, tuple[int, int]] = {}
        for t in folded:
            d, h = read.totals[t]
            day, hour = _add(day, d), _add(hour, h)
            for bucket, (dn, hn) in read.buckets.get(t, {}).items():
                od, oh = other.get(bucket, (0, 0))
                other[bucket] = (od + dn, oh + hn)
        totals[OTHER], hist[OTHER] = (day, hour), other
    out = []
    for job_type, (day, hour) in totals.items():
        per = hist.get(job_type, {})
        out.append(TypeFigures(job_type, _window(hour, {b: n[1] for b, n in per.items()}),
                               _window(day, {b: n[0] for b, n in per.items()})))
    return out
