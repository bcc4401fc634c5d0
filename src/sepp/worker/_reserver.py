"""The worker's reserver: long-poll ``Reserve`` for as many jobs as there is room for.

One lane asks for ``concurrency + prefetch − running − prefetched − asked`` jobs (at most
``max_reserve`` a call); while prefetched jobs are still waiting it asks only once there is
room for a worthwhile batch (half the room, or a full ``max_reserve``). A second lane keeps
another full batch in flight when the room allows two. A lane with nothing to ask parks
until the slots make room (``wake``). A failed call is tried again after a pause (0.05 s
doubling up to ``RESERVE_RETRY_MAX``) that ends early once the channel connects again; a
refused token stops the worker (``on_fatal``).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

import grpc

from sepp.errors import PermissionDenied, RejectedError, TransportError, Unauthenticated
from sepp.worker._dependencies import DependencyReader
from sepp.worker._failures import FailureLog
from sepp.worker._lease import LeaseKeeper
from sepp.worker._reports import Reports
from sepp.worker._rpc import WorkerRpc
from sepp.worker._slots import SlotPool
from sepp.worker.config import WorkerConfig
from sepp.worker.job import Job

log = logging.getLogger("sepp.worker")

#: Longest pause, seconds, between a failed ``Reserve`` and the next try (0.05 s doubling up
#: to this). The pause ends early once the channel connects again (``WorkerRpc.pause``), so
#: after a server restart the next try goes out as soon as gRPC's reconnect backoff (100 ms
#: to 1 s) finds the server; the pause itself only paces a server that answers with errors.
RESERVE_RETRY_MAX = 2.0


class Reserver:
    """The ``Reserve`` lanes of one worker.

    Args:
        config: The worker's settings (queues, concurrency, poll_wait, max_reserve, …).
        rpc: The worker's calls.
        pool: Where reserved jobs go (its ``running``, ``pending`` and ``ahead`` size the asks).
        keeper: Keeps the leases of reserved jobs alive.
        reports: Releases what arrives after the stop began; ``stats`` counts the calls.
        on_fatal: Called with the error once the server refused the worker's token (the
            worker then stops; never retried).
        monotonic: Monotonic seconds (when each job arrived: ``Job._reserved_at``).
        result_limits: Where each answer's ``max_result_bytes`` go (queue → bytes, the latest
            the server said): the slot pool checks a handler's result against it.

    ``active`` turns False when the worker stops; ``calls`` are the ``Reserve`` calls in
    flight (a stop may cancel them: it sets ``cancelled`` first).
    """

    def __init__(self, config: WorkerConfig, rpc: WorkerRpc, pool: SlotPool, keeper: LeaseKeeper,
                 reports: Reports, on_fatal: Callable[[TransportError], None],
                 monotonic: Callable[[], float], result_limits: dict[str, int] | None = None) -> None:
        self._config, self._rpc, self._pool, self._keeper = config, rpc, pool, keeper
        self._result_limits: dict[str, int] = {} if result_limits is None else result_limits
        self._release, self._stats = reports.release, reports.stats
        self._on_fatal, self._monotonic = on_fatal, monotonic
        #: False once the worker stops: lanes end after the call they are in.
        self.active = True
        #: Set when a lane may have something to ask again (and at stop, to wake every lane).
        self.room = asyncio.Event()
        #: Reserve calls in flight, and the jobs they asked for.
        self.calls: set[Any] = set()
        self._asking = 0
        #: Most jobs one Reserve asks for: ``max_reserve``, lowered to the server's cap
        #: (``max_reserve_batch``) once a refusal names it (``_lower_reserve_cap``).
        self._max_reserve = config.max_reserve
        #: Lanes waiting on ``room``, and how many there are. A second lane keeps a Reserve in
        #: flight while the first one's answer is on its way, when there may be room for two
        #: full batches (concurrency + the most prefetch ≥ 2 × max_reserve).
        self._parked = 0
        self._lanes = 2 if config.concurrency + pool.ahead_max >= 2 * config.max_reserve else 1
        #: Set by a stop that cancels the calls still open (a lane then ends quietly).
        self.cancelled = False
        self.tasks: list[asyncio.Task[None]] = []
        #: What the reserved jobs read their dependencies' outcomes with (on this loop).
        self._dependencies = DependencyReader(rpc)

    def start(self) -> None:
        """Start the lanes (``tasks``)."""
        self._dependencies.loop = asyncio.get_running_loop()
        self.tasks = [asyncio.create_task(self._reserve_loop(lane), name=f"sepp-reserver-{lane}")
                      for lane in range(self._lanes)]

    def _want(self, lane: int) -> int:
        """How many jobs lane ``lane`` should ask for now (0: none)."""
        most = self._max_reserve
        pool = self._pool
        capacity = self._config.concurrency + pool.ahead
        want = capacity - len(pool.running) - len(pool.pending) - self._asking
        if want <= 0:
            return 0
        if lane > 0:  # the second lane only ever asks for a full batch
            return most if want >= most else 0
        if pool.pending and want < min(most, capacity // 2):
            return 0  # jobs are still waiting here: ask once a worthwhile batch fits
        return min(want, most)

    def _lower_reserve_cap(self, error: Exception, asked: int) -> bool:
        """Whether ``error`` is the server refusing a ``Reserve`` of ``asked`` jobs for asking
        more than its ``max_reserve_batch`` (``INVALID_ARGUMENT`` on ``max_jobs``, naming a
        limit below ``asked``); if so, every later call asks for at most that many (logged
        once at WARNING) and the call can go again at once."""
        rejection = getattr(error, "rejection", None) if isinstance(error, RejectedError) else None
        limit = getattr(rejection, "limit", None)
        if getattr(rejection, "field", "") != "max_jobs" or not isinstance(limit, int) or not 1 <= limit < asked:
            return False
        if limit < self._max_reserve:
            log.warning("the server takes at most %d jobs a Reserve (max_reserve_batch): asking for no more "
                        "than that (max_reserve is %d)", limit, self._config.max_reserve)
            self._max_reserve = limit
        return True

    def wake(self) -> None:
        """Wake the lanes parked on ``room`` when one of them now has something to ask."""
        if self._parked and (self._want(0) > 0 or (self._lanes > 1 and self._want(1) > 0)):
            self.room.set()

    async def _reserve_loop(self, lane: int = 0) -> None:
        cfg = self._config
        backoff = 0.05
        failures = FailureLog(log, "reserve", clock=self._monotonic)
        while self.active:
            ask = self._want(lane)
            if ask <= 0:
                self.room.clear()
                self._parked += 1
                try:
                    await self.room.wait()
                finally:
                    self._parked -= 1
                continue
            call = self._rpc.reserve_call(cfg.queues, ask, cfg.poll_wait, cfg.worker_id, cfg.lease_duration)
            self.calls.add(call)
            self._asking += ask
            try:
                resp = await call
            except asyncio.CancelledError:
                if self.cancelled:
                    return  # stop() cancelled the long-poll
                raise
            except Exception as exc:  # transport errors; anything else is logged, never fatal to the loop
                if not self.active:
                    return
                if isinstance(exc, grpc.RpcError):
                    error = self._rpc.convert(exc)
                    if isinstance(error, Unauthenticated | PermissionDenied):  # never retried
                        log.error("reserve refused, stopping the worker: %s", error)
                        self._on_fatal(error)
                        return
                    if self._lower_reserve_cap(error, ask):
                        continue  # asked for more than the server takes: ask again, for fewer
                    failures.failed(error, backoff)  # first at once, then at most every 30 s
                else:
                    log.exception("reserve failed unexpectedly; retrying in %.2fs", backoff)
                await self._sleep_unless_stopping(backoff)
                backoff = min(backoff * 2, RESERVE_RETRY_MAX)
                continue
            finally:
                self.calls.discard(call)
                self._asking -= ask
                self.room.set()  # the other lane may now ask
            backoff = 0.05
            failures.worked()
            self._rpc.answered()
            self._stats["reserve_calls"] += 1
            if not resp.reservations:
                continue
            if resp.max_result_bytes:
                self._result_limits.update(resp.max_result_bytes)
            now = self._monotonic()
            progress, dependencies = self._keeper.progress, self._dependencies
            jobs = [Job(r, now, progress, dependencies) for r in resp.reservations]
            self._stats["reserved"] += len(jobs)
            self._keeper.track_all(jobs)
            if not self.active:
                self._release(jobs, "worker stopping: reservation arrived after stop")
                return
            self._pool.add(jobs, ask)

    async def _sleep_unless_stopping(self, seconds: float) -> None:
        """Pause ``seconds`` after a failed ``Reserve``: less once the channel connects again
        (``WorkerRpc.pause``), and not past a stop."""
        stopping = asyncio.ensure_future(self._hurry_or_stop())
        pause = asyncio.ensure_future(self._rpc.pause(seconds))
        try:
            await asyncio.wait({stopping, pause}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stopping.cancel()
            pause.cancel()

    async def _hurry_or_stop(self) -> None:
        while self.active:
            self.room.clear()
            await self.room.wait()


__all__ = ["RESERVE_RETRY_MAX", "Reserver"]
