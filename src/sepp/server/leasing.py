"""Leasing: ``reserve`` with its long-poll, ``stop_reserving`` / ``end_long_polls`` that end
long-polls early, and the give-backs of leased jobs that were never delivered (``release``,
``give_back``, the background give-back of an abandoned reservation, ``bury_damaged``).

The long-poll waits in real time on the event loop's clock; every time a lease is measured
from comes from ``parts.clock``. A give-back is a settle (``SettleKind.RELEASE``) through
``Settlement``; errors are ``sepp.server.errors`` exceptions (``InvalidRequest``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Sequence
from typing import Any

from sepp.domain.records import JobRecord
from sepp.limits import MAX_LEASE, MIN_LEASE
from sepp.quoting import clip
from sepp.server.errors import InvalidRequest
from sepp.server.parts import ENGINE_LOG as log
from sepp.server.parts import EngineService, ServerParts
from sepp.server.queues import QueueState
from sepp.server.settlement import Settlement
from sepp.storage.base import DAMAGED_ROW, NO_FLOW, ReserveParams, SettleKind, SettleParams, SweepResult
from sepp.storage.rows import describe

#: Shortest wait of a long-polling Reserve for the next token of a rate-limited queue, seconds.
_MIN_TOKEN_WAIT = 0.001


class _Reserving:
    """One ``Leasing.reserve`` call in progress: the notifier event its long-poll waits on,
    whether it waits on it right now (``parked``), and whether ``stop_reserving`` stopped it
    ."""

    __slots__ = ("event", "parked", "stopped")

    def __init__(self, event: asyncio.Event) -> None:
        self.event = event
        self.parked = False
        self.stopped = False


def _stop_calls(calls: Iterable[_Reserving]) -> int:
    """Mark each of ``calls`` not stopped yet as stopped and wake it (``stop_reserving``,
    ``end_long_polls``); returns how many it stopped."""
    woken = 0
    for call in calls:
        if not call.stopped:
            call.stopped = True
            call.event.set()
            woken += 1
    return woken


class Leasing(EngineService):
    """Reserve and give back on top of the parts' ``Store``, for the node ``parts.node``:
    leases are granted to this node and noted in ``parts.workers``; long polls wait on
    ``parts.notifier``. ``settlement`` settles the give-backs (``release``)."""

    def __init__(self, parts: ServerParts, settlement: Settlement) -> None:
        super().__init__(parts)
        self.node = parts.node
        self.workers = parts.workers
        self._settle = settlement.settle
        # A Reserve promotes every queue's due jobs: wake this node's long polls of the
        # queues it promoted and report the promotions (the sweep would find nothing left,
        # so wake nobody and report nothing).
        parts.store.on_promoted(self._promoted)
        #: The ``reserve`` calls in progress by worker id (calls with an empty id are not
        #: kept): what ``stop_reserving`` wakes.
        self._reserving: dict[str, set[_Reserving]] = {}
        #: Every ``reserve`` call in progress, with or without a worker id: what
        #: ``end_long_polls`` wakes when the server stops.
        self._calls: set[_Reserving] = set()
        #: Set by ``end_long_polls``: no ``reserve`` waits any more (the server is stopping).
        self._no_waits = False
        #: Give-back tasks of abandoned reservations (kept referenced until done).
        self._background: set[asyncio.Future[Any]] = set()

    async def reserve(self, queues: Sequence[str], max_jobs: int, lease_s: float | None, wait_s: float,
                      worker_id: str, *, host: str = "", concurrency: int = 0,
                      client_version: str = "") -> list[JobRecord]:
        """Lease up to ``max_jobs`` jobs from ``queues`` (in order), long-polling up to ``wait_s``.

        Unknown and paused queues give nothing. A call with a ``worker_id`` is kept, for its
        whole length, where ``stop_reserving(worker_id)`` finds it, and is noted in
        ``workers`` (the Workers page, with the caller's ``host``, handler slots
        ``concurrency`` and ``client_version``) twice: once its arguments are accepted, before
        any wait — so a worker idle in its first long poll is listed at once, not up to
        ``wait_s`` later — and again when it ends (its latest Reserve; not when the worker
        stopped cleanly in the meantime, ``stop_reserving(stopped=True)``). Raises
        ``InvalidRequest`` for bad arguments (then nothing is noted).

        Each lease runs from when the store grants it — the engine's clock read in the
        transaction that writes it, after any wait for the store — not from when the call
        came: a job's ``lease_expires_at`` is its ``started_at`` plus the lease
        (docs/decisions.md "A lease runs from when it is granted").
        """
        lim = self.limits
        if not queues:
            raise InvalidRequest("reserve needs at least one queue", "queues")
        if not 1 <= max_jobs <= lim.max_reserve_batch:
            raise InvalidRequest(f"max_jobs must be between 1 and {lim.max_reserve_batch} (got {max_jobs})", "max_jobs",
                                 1 if max_jobs < 1 else lim.max_reserve_batch, max_jobs)
        if not 0 <= wait_s <= lim.max_reserve_wait:
            raise InvalidRequest(f"wait must be between 0 and {lim.max_reserve_wait:g} s", "wait",
                                 0 if wait_s < 0 else lim.max_reserve_wait, wait_s)
        if lease_s is not None and not MIN_LEASE <= lease_s <= MAX_LEASE:
            raise InvalidRequest(f"lease_duration must be between {MIN_LEASE:g} and {MAX_LEASE:g} s",
                                 "lease_duration", MIN_LEASE if lease_s < MIN_LEASE
                                 else MAX_LEASE, lease_s)
        if "\x00" in worker_id:  # a label; PostgreSQL text cannot hold U+0000 (docs/decisions.md)
            raise InvalidRequest("worker_id must not contain a NUL character (U+0000)", "worker_id")
        names = list(dict.fromkeys(queues))
        began = self.workers.reserved(worker_id, host, queues, concurrency, client_version)  # "" is not noted
        # The long-poll waits in real time, on the event loop's clock (the one wait_for uses).
        loop = asyncio.get_running_loop()
        deadline = loop.time() + wait_s
        event = self.notifier.register(names)
        me = _Reserving(event)
        self._calls.add(me)
        if worker_id:
            self._reserving.setdefault(worker_id, set()).add(me)
        try:
            while True:
                # Clear before trying, never after: a wake-up that lands while the store is
                # leasing (a job released or stored in the meantime) must end the next wait.
                event.clear()
                if me.stopped:  # woken by stop_reserving: answer at once, lease nothing more
                    return []
                active: list[QueueState] = []
                for name in names:
                    q = self.queues.get(name)
                    if q is not None and not q.paused:
                        active.append(q)
                if active:
                    lease_for = {q.name: int(lease_s * 1_000_000) if lease_s else q.lease_us for q in active}
                    # Payloads beyond one message's worth are not leased at all (the servicer
                    # gives back the few that still do not fit exactly).
                    flow = {q.name: q.flow for q in active if q.flow is not None}
                    # The store reads the clock again when it writes the leases: a lease runs
                    # from when it is granted, not from now (a wait in the commit queue is not
                    # taken out of it; docs/decisions.md "A lease runs from when it is granted").
                    params = ReserveParams([q.name for q in active], max_jobs, self._clock_now(), lease_for, worker_id,
                                           self.limits.max_message_bytes, self.node, flow or NO_FLOW, self.clock)
                    jobs = await self._lease(params)
                    if jobs:
                        if self.job_events.active:
                            self.job_events.reserved(jobs, worker_id)
                        return jobs  # stopped while leasing or not: what was leased is answered
                remaining = deadline - loop.time()
                if remaining <= 0 or me.stopped or self._no_waits:
                    return []
                # A rate limit frees capacity by time, which notifies nobody: try again when
                # the next token is due, or when woken, whichever comes first.
                poll = min((q.flow.token_wait() for q in active if q.flow is not None and q.flow.rate_amount),
                           default=remaining)
                me.parked = True
                try:
                    await asyncio.wait_for(event.wait(), min(remaining, max(poll, _MIN_TOKEN_WAIT)))
                except TimeoutError:
                    if poll >= remaining:
                        return []
                finally:
                    me.parked = False
        finally:
            self.notifier.unregister(names, event)
            self._calls.discard(me)
            if worker_id:
                self.workers.reserved(worker_id, host, queues, concurrency, client_version, began)
                calls = self._reserving.get(worker_id)
                if calls is not None:
                    calls.discard(me)
                    if not calls:
                        del self._reserving[worker_id]

    def _promoted(self, result: SweepResult, now: int) -> None:
        """A reserve's own promotion made ``result``'s jobs READY at ``now`` (µs UTC): this
        node's long polls of their queues are woken, and the promotions reported as the
        sweep's are (the lag metric, the live ``promoted`` events)."""
        if result.promoted_run_at:
            self.events.promoted(now, result.promoted_run_at)
        if result.promoted_jobs and self.job_events.active:
            self.job_events.promoted(result.promoted_jobs, now)
        for name in sorted(result.queues):
            self.notifier.ready(name)

    def parked(self, worker_id: str | None = None) -> int:
        """How many ``reserve`` calls with ``worker_id`` (None: any, an empty id included)
        wait in their long-poll right now (tests and diagnostics)."""
        calls = self._calls if worker_id is None else self._reserving.get(worker_id, ())
        return sum(1 for call in calls if call.parked)

    def stop_reserving(self, worker_id: str, stopped: bool = False) -> int:
        """End the long-polls of the ``reserve`` calls in progress with ``worker_id`` (a
        stopping worker): each is marked stopped and woken. One parked in its
        wait returns ``[]`` at once without leasing again; one inside the store's lease returns
        what it leased, as usual (the worker gives it back). Calls that start later are not
        affected. Returns how many calls this stopped (0 when none is open or all were stopped
        already: idempotent). Every call with that id is stopped, whichever process sent it
        (two processes sharing an id: the other's parked call just answers empty early).
        ``stopped``: the worker's session is over (its last call): ``workers`` lists it as
        stopped until its next Reserve.

        Raises ``InvalidRequest`` (field ``worker_id``) when ``worker_id`` is empty.
        """
        if not worker_id:
            raise InvalidRequest("stop_reserving needs the worker_id its reserves were sent with", "worker_id")
        woken = _stop_calls(self._reserving.get(worker_id, ()))
        if stopped:
            self.workers.stopped(worker_id)
        return woken

    def end_long_polls(self) -> int:
        """The server is stopping: every ``reserve`` call waiting in its long-poll answers
        ``[]`` now (one inside the store's lease answers what it leased), and no later one
        waits, so a graceful stop is not held up by idle workers' long-polls (up to
        ``max_reserve_wait``). Workers then see the server go away and reconnect as usual.
        Returns how many calls it woke. Idempotent."""
        self._no_waits = True
        return _stop_calls(self._calls)

    async def _lease(self, params: ReserveParams) -> list[JobRecord]:
        """``store.reserve``, but if the caller goes away (deadline, cancel, disconnect) while the
        store is leasing, the jobs it leased are given back (released: attempt and place kept)
        instead of staying held by nobody until their lease expires."""
        leasing = asyncio.ensure_future(self.store.reserve(params))
        try:
            return await asyncio.shield(leasing)
        except asyncio.CancelledError:
            leasing.add_done_callback(self._give_back_leased)
            self._background.add(leasing)  # type: ignore[arg-type]
            leasing.add_done_callback(self._background.discard)  # type: ignore[arg-type]
            raise

    async def quiesce(self) -> None:
        """Wait until every give-back of an abandoned reservation is done: the lease it waits
        for and the release that follows (tests; the store may run operations in any order)."""
        while self._background:
            await asyncio.gather(*list(self._background), return_exceptions=True)

    def _give_back_leased(self, leasing: asyncio.Future[list[JobRecord]]) -> None:
        if leasing.cancelled() or leasing.exception() is not None or not leasing.result():
            return
        task = asyncio.ensure_future(self.release(leasing.result(), "the reserve call ended before delivery"))
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    def give_back(self, jobs: Sequence[JobRecord], why: str) -> None:
        """``release`` ``jobs`` in the background (a task kept referenced until done; ``quiesce``
        waits for it): for callbacks that cannot await. A failure is logged; the leases then
        expire as usual."""
        async def run() -> None:
            try:
                await self.release(jobs, why)
            except Exception:
                log.warning("giving back %d job(s) of a cancelled reserve failed; their leases will expire",
                            len(jobs), exc_info=True)

        task = asyncio.ensure_future(run())
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def release(self, jobs: Sequence[JobRecord], why: str) -> None:
        """Give leased-but-undelivered ``jobs`` back at once (nack ``release``: attempt and place kept)."""
        now = self._clock_now()
        items = [SettleParams(j.id, j.lease_id or b"", SettleKind.RELEASE, now, outcome="released",
                              error_message=why) for j in jobs]
        await self._settle(items)  # wakes the reservers of their queues

    async def bury_damaged(self, jobs: Sequence[tuple[JobRecord, Exception]]) -> None:
        """Dead-letter leased ``jobs`` that could not be converted into a message (a damaged
        row, with the error) with reason ``DAMAGED_ROW`` instead of handing them out; each is
        logged with its id, queue and the error. A failure here is logged too:
        the lease then expires and the sweeps deal with the row."""
        for rec, exc in jobs:
            log.warning("job %s in queue %s cannot be delivered (%s): dead-lettered with %s",
                        describe(rec), clip(repr(rec.queue), 200), clip(f"{type(exc).__name__}: {exc}", 300),
                        DAMAGED_ROW)
        try:
            await self.store.reserve_damaged([(rec.id, rec.lease_id or b"") for rec, _ in jobs], self._clock_now())
        except Exception:
            log.exception("dead-lettering %d damaged job(s) failed; their leases will expire", len(jobs))
            return
        self.events.ended([rec.id for rec, _ in jobs], ())  # waits for them answer now


__all__ = ["Leasing"]
