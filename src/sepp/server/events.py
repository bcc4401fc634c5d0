"""Engine events as subscriber lists.

``JobEngine`` announces SCHEDULED jobs stored (the promotion sweep wakes in time), rows
committed by an enqueue (admin throughput stats), jobs that reached COMPLETED /
DEAD_LETTERED (admin stats), and — for the metrics — rejections, shed calls,
settles, expired leases and promotions (the last two from the sweeper). Each is an ``Event``: any number of subscribers
(the sweeper, the admin engine, later metrics or tracing) sit next to each other, none
replaces another. A subscriber that raises is logged and skipped: the other subscribers
still run and the request that emitted the event is not failed by it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Generic, ParamSpec

from sepp.rejections import CodedRejection
from sepp.storage.base import Dedups, JobRow, SettleParams, SettleResult

log = logging.getLogger("sepp.events")

P = ParamSpec("P")


class Event(Generic[P]):
    """One event with a list of subscribers, called in subscription order.

    ``event(*args)`` emits: each subscriber is called with ``args``; an exception from one is
    logged (logger ``sepp.events``, with traceback) and does not reach the emitter or stop
    the subscribers after it. Subscribers run synchronously on the emitting task, so they
    must be quick and must not block.
    """

    __slots__ = ("_subscribers", "name")

    def __init__(self, name: str) -> None:
        self.name = name
        self._subscribers: tuple[Callable[P, None], ...] = ()

    def subscribe(self, fn: Callable[P, None]) -> Callable[[], None]:
        """Add ``fn``; returns a function that removes it again (idempotent)."""
        self._subscribers = (*self._subscribers, fn)

        def unsubscribe() -> None:
            self._subscribers = tuple(s for s in self._subscribers if s is not fn)

        return unsubscribe

    @property
    def subscribers(self) -> tuple[Callable[P, None], ...]:
        """The current subscribers, in call order."""
        return self._subscribers

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> None:
        """Emit: call every subscriber; log and skip the ones that raise."""
        for fn in self._subscribers:
            try:
                fn(*args, **kwargs)
            except Exception:
                log.exception("subscriber %r of engine event %s raised; skipped", fn, self.name)


@dataclass(frozen=True, slots=True)
class EngineEvents:
    """The events a ``JobEngine`` emits.

    - ``scheduled(run_at_us)``: SCHEDULED jobs were stored or retried; ``run_at_us`` is the
      earliest run_at (µs since the epoch, UTC).
    - ``stored(rows, dedups)``: one enqueue commit; ``dedups`` (``storage.base.Dedups``) holds
      the indexes of rows that were deduplicated (not stored) with the existing job.
    - ``finished(queue, state, count)``: ``count`` jobs of ``queue`` reached ``state``
      (COMPLETED = 4 or DEAD_LETTERED = 5).

    For the metrics (they subscribe to these; each is emitted once per call or pass, never per job):

    - ``rejected(rejections)``: jobs of an enqueue call were rejected (and the call was
      answered with them): one (queue, the wire ``Rejection``, read as a ``CodedRejection``)
      per rejected job, the queue as the request named it (unvalidated text).
    - ``overloaded(jobs)``: an enqueue call of ``jobs`` valid jobs was shed (OVERLOADED).
    - ``settled(items, results)``: one settle call, its ``SettleParams`` and the store's
      ``SettleResult`` for each, in order (refused ones included, with their error).
    - ``leases_expired(expired, dead)``: a reclaim pass took back ``expired[queue]`` leases and
      dead-lettered ``dead[queue]`` of them (LEASE_EXPIRED on the last attempt).
    - ``promoted(now, run_ats)``: a promotion (the sweep's, or a Reserve's on its way) made
      jobs READY at ``now`` (µs); the run_at (µs) each had.
    - ``sql_enqueued(counts)``: this node heard that jobs were committed through the SQL
      functions (``Store.on_sql_enqueued``): jobs stored per queue. Every node hears each.

    For waits for jobs (``server.waiting`` subscribes; acks and nacks it reads from
    ``settled``, a reclaim pass's dead letters from ``reclaimed``):

    - ``ended(job_ids, queues)``: jobs finished or left the store outside a settle — an admin
      cancel or delete (their 16-byte ids), a damaged row dead-lettered, a queue purged or
      deleted (``queues``: every job of them may be gone).

    For the job-type figures (they subscribe):

    - ``reclaimed(counts)``: a reclaim pass took back expired leases; {(queue, job_type, new
      state): jobs} (``SweepResult.expired_types``: READY = retried, DEAD_LETTERED, CANCELLED).
    """

    scheduled: Event[[int]] = field(default_factory=lambda: Event("scheduled"))
    stored: Event[[Sequence[JobRow], Dedups]] = field(default_factory=lambda: Event("stored"))
    finished: Event[[str, int, int]] = field(default_factory=lambda: Event("finished"))
    rejected: Event[[Sequence[tuple[str, CodedRejection]]]] = field(default_factory=lambda: Event("rejected"))
    overloaded: Event[[int]] = field(default_factory=lambda: Event("overloaded"))
    settled: Event[[Sequence[SettleParams], Sequence[SettleResult]]] = field(
        default_factory=lambda: Event("settled"))
    leases_expired: Event[[Mapping[str, int], Mapping[str, int]]] = field(
        default_factory=lambda: Event("leases_expired"))
    promoted: Event[[int, Sequence[int]]] = field(default_factory=lambda: Event("promoted"))
    sql_enqueued: Event[[Mapping[str, int]]] = field(default_factory=lambda: Event("sql_enqueued"))
    reclaimed: Event[[Mapping[tuple[str, str, int], int]]] = field(default_factory=lambda: Event("reclaimed"))
    ended: Event[[Sequence[bytes], Sequence[str]]] = field(default_factory=lambda: Event("ended"))
