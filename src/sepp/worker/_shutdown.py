"""A worker's graceful stop, step by step (``Stopper.run``).

1. Stop reserving. A ``Reserve`` that may have been answered is never cancelled (its jobs
   would stay leased to nobody): the server is asked to end this worker's long-polls
   (``StopReserving``, repeated every ``RESERVE_STOP_EVERY`` while a call is open) and every
   call is let end; what it brings is released at once. A call is cancelled only on a
   hurry (a second signal, ``stop(0)``), once the server left ``StopReserving`` unanswered
   for ``RESERVE_STOP_TIMEOUT``, or after ``RESERVE_STOP_WAIT`` against a server without
   ``StopReserving``.
2. Release every prefetched job not started.
3. Let running handlers finish within the grace period (a hurry cuts it short).
4. Cancel async handlers still running and release their jobs (a blocking handler's
   thread cannot be stopped: its job is released too and its result ignored). The release's
   error message, kept in the job's history, says why: ``shutdown grace exceeded`` when the
   grace period ran out, else what hurried the stop (``Stopper.hurried_by``: a second
   interrupt, a second SIGTERM, ``stop(0)``) — ``abandon_reason``.
5. Wait for the acks and releases the server has not answered yet: as long as it answers,
   or up to ``SETTLE_STOP_TIMEOUT`` past its last answer; a hurry gives up at once what is
   being re-sent. What is given up (logged at WARNING with its count) comes back after
   its lease.
6. Say the session is over (``StopReserving`` with ``stopped``, deadline
   ``STOPPED_DEADLINE``, only over a connection the channel holds and unless the stop gave
   up on the server's answers; its failure is only logged at DEBUG), so ``sepp workers
   list`` and the Workers page show the worker as stopped at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
from typing import Any

from sepp.domain.clock import Clock
from sepp.worker._lease import LeaseKeeper
from sepp.worker._reports import Reports
from sepp.worker._reserver import Reserver
from sepp.worker._rpc import WorkerRpc
from sepp.worker._slots import SlotPool
from sepp.worker._threads import DaemonThreadPool

log = logging.getLogger("sepp.worker")

#: A graceful stop never cancels a ``Reserve`` that may have been answered (its jobs would
#: stay leased to nobody): it asks the server to end the worker's long-polls
#: (``StopReserving``) and awaits the calls. Seconds between two ``StopReserving`` while
#: calls are still open (one may reach the server after the previous ``StopReserving``).
RESERVE_STOP_EVERY = 0.25
#: Seconds without an answer to ``StopReserving`` (the server unreachable or stuck) after which
#: the calls still open are cancelled anyway. While the server answers, an open call is never
#: cancelled: it ends by itself (at once once stopped, else at the end of its long-poll or its
#: deadline). A cancel that crosses an answer already sent loses that answer's jobs — the
#: server saw its call end well and gives nothing back, and they stay RESERVED until their
#: lease expires (the CI failure of the SIGTERM test on a loaded machine, where a worker
#: starved of CPU took its answers in after this timeout).
RESERVE_STOP_TIMEOUT = 5.0
#: Against a server without ``StopReserving`` (UNIMPLEMENTED): seconds to wait for a
#: ``Reserve`` in flight before cancelling it (one still open is parked in its long-poll).
RESERVE_STOP_WAIT = 0.25
#: Deadline, seconds, of the stop's last call, which tells the server the worker stopped (the
#: Workers page lists it "stopped"): short, as nothing waits on its answer; shorter still
#: after a second signal.
STOPPED_DEADLINE = 2.0
#: Seconds a stop waits for acks and releases after the handlers are done, counted from the
#: last ``Settle`` the server answered: against a server that stopped answering, what is still
#: unsent is then given up (its jobs come back after their lease). A second signal gives it up
#: at once (``Settler.flush``'s hurry).
SETTLE_STOP_TIMEOUT = 10.0
#: Seconds a stop waits for the handlers it cancelled (past the grace period) to end; a
#: handler that swallows the cancellation is still running then, and its job is released.
CANCEL_WAIT = 5.0


class Stopper:
    """The graceful stop of one worker's parts (see the module docstring).

    Args:
        worker_id: The worker's id (``StopReserving`` names it).
        rpc, reserver, pool, reports, keeper, threads: The worker's parts.
        hurry: Set by a second signal or ``stop(0)``: the stop cuts every wait short.
        clock: The worker's clock (the grace period and the ``StopReserving`` waits).

    ``hurried_by`` is set (by the worker, before it sets ``hurry``) to what hurried the stop,
    as the release reasons name it: "a second interrupt (SIGINT)", "a second SIGTERM",
    "stop(0)"; ``abandon_reason`` turns it into the history text of a released job.
    """

    def __init__(self, worker_id: str, rpc: WorkerRpc, reserver: Reserver, pool: SlotPool, reports: Reports,
                 keeper: LeaseKeeper, threads: DaemonThreadPool, hurry: asyncio.Event, clock: Clock) -> None:
        self._worker_id = worker_id
        self._rpc = rpc
        self._reserver = reserver
        self._pool = pool
        self._reports = reports
        self._keeper = keeper
        self._threads = threads
        self._hurry = hurry
        self._clock = clock
        #: The stop gave up on the server's answers (StopReserving or acks unanswered): its
        #: last call (``_say_stopped``) is not sent, it would only wait out its deadline.
        self.unanswered = False
        #: What set ``hurry`` ("a second interrupt (SIGINT)", "a second SIGTERM", "stop(0)"),
        #: named in the history of the jobs the stop releases; "" while not hurried.
        self.hurried_by = ""

    async def run(self, grace: float) -> None:
        """Steps 1 to 6, ``grace`` seconds (from now) for the running handlers; then
        ``close``, whatever failed."""
        monotonic = self._clock.monotonic
        started = monotonic()
        pool = self._pool
        try:
            # 1. stop reserving: every call is let end (see _await_reservers).
            self._reserver.room.set()
            pool.wake_idle()
            await self._await_reservers()
            # 2. release every prefetched job that never started.
            pending = pool.take_pending()
            if pending:
                log.info("releasing %d prefetched job(s)", len(pending))
                self._reports.release(pending, "worker stopping: job was prefetched, never started")
            # 3. let running handlers finish within the grace period.
            running = set(pool.running)
            if running:
                log.info("waiting up to %.1fs for %d running job(s)", grace, len(running))
                hurry = asyncio.create_task(self._hurry.wait())
                remaining = max(0.0, grace - (monotonic() - started))
                await asyncio.wait({*running, hurry}, timeout=remaining, return_when=asyncio.FIRST_COMPLETED)
                while not self._hurry.is_set() and any(not t.done() for t in running):
                    remaining = grace - (monotonic() - started)
                    if remaining <= 0:
                        break
                    await asyncio.wait({*(t for t in running if not t.done()), hurry}, timeout=remaining,
                                       return_when=asyncio.FIRST_COMPLETED)
                hurry.cancel()
            # 4. abandon what is still running: release it.
            await self._abandon_running()
            # 5. wait for the acks and releases not answered yet: while the server answers, or
            #    SETTLE_STOP_TIMEOUT past its last answer; a hurry gives up what is being re-sent
            #    at once (Settler.flush). What is given up comes back after its lease.
            dropped = await self._reports.settler.flush(SETTLE_STOP_TIMEOUT, self._hurry)
            if dropped:
                self.unanswered = True
                log.warning("gave up %d ack(s)/release(s) the server did not answer (%s): their jobs come "
                            "back after their lease", dropped,
                            "the stop was hurried" if self._hurry.is_set()
                            else f"no answer for {SETTLE_STOP_TIMEOUT:.0f}s")
            for _ in range(3):  # the last verdicts' reports run as callbacks, right after
                if not self._reports.settling:
                    break
                await asyncio.sleep(0)
            # 6. say goodbye: the session is over (the Workers page lists the worker stopped,
            #    not live, until its next Reserve). Nothing depends on the answer.
            await self._say_stopped()
        finally:
            await self.close()

    async def close(self) -> None:
        """Stop the lease timers, close the channel, let the handler threads go."""
        await self._keeper.close()
        await self._rpc.close()
        self._threads.shutdown()

    async def _abandon_running(self) -> None:
        """Cancel the handlers still running and release their jobs (step 4)."""
        pool = self._pool
        left = [t for t in pool.running if not t.done()]
        if not left:
            return
        # A slot is in running exactly while it runs a job, and runs nothing but
        # its handler across an await: each of these is inside its handler.
        stuck = [t for t in left if t in pool.running]
        if self._hurry.is_set():  # a second signal (or stop(0)) cut the grace short
            log.warning("releasing %d running job(s) now (the stop was hurried)", len(stuck))
        else:
            log.warning("releasing %d job(s) still running after the grace period", len(stuck))
        pool.abandoning = abandon_reason(self.hurried_by if self._hurry.is_set() else "")
        for task in stuck:
            task.cancel()
        await asyncio.wait(left, timeout=CANCEL_WAIT)
        # A handler that swallows cancellation never ends: give its job back anyway.
        hung = [pool.running[t] for t in left if not t.done() and t in pool.running]
        if hung:
            log.warning("%d handler(s) ignored cancellation; releasing their job(s)", len(hung))
            self._reports.release(hung, abandon_reason(self.hurried_by if self._hurry.is_set() else "",
                                                       ended=False))

    async def _await_reservers(self) -> None:
        """Let the reservers end, each releasing what its last call brought.

        A ``Reserve`` that may have been answered is never cancelled (its jobs would stay
        leased to nobody): the server is asked to end this worker's long-polls
        (``StopReserving`` at once, then every ``RESERVE_STOP_EVERY`` seconds while calls
        are open, for a call that reached the server after the last one) and the calls are
        awaited. They are cancelled only on a hurry, once ``StopReserving`` went unanswered for
        ``RESERVE_STOP_TIMEOUT`` seconds (the server unreachable or stuck: each answer restarts
        that wait), or — a server without ``StopReserving`` — after ``RESERVE_STOP_WAIT``
        seconds, as before it existed. A call the answering server does not stop (it reached
        another node) ends at the end of its long-poll (``poll_wait``) or its deadline."""
        reserver = self._reserver
        reservers = [t for t in reserver.tasks if not t.done()]
        older_server = False
        if reservers and not self._hurry.is_set():
            monotonic = self._clock.monotonic
            started = monotonic()
            cancel_at, ask_at = started + RESERVE_STOP_TIMEOUT, started
            asking: asyncio.Task[int | None] | None = None
            hurry = asyncio.create_task(self._hurry.wait())
            try:
                while not hurry.done() and (left := [t for t in reservers if not t.done()]):
                    if asking is not None and asking.done():
                        woken = self._stop_reserving_answer(asking)
                        if woken is None:  # an older server
                            older_server = True
                            cancel_at, ask_at = min(cancel_at, started + RESERVE_STOP_WAIT), math.inf
                        elif woken >= 0:  # the server answers: its calls end by themselves
                            cancel_at = max(cancel_at, monotonic() + RESERVE_STOP_TIMEOUT)
                        asking = None
                    now = monotonic()
                    if now >= cancel_at:
                        break
                    if asking is None and now >= ask_at and reserver.calls:
                        asking = asyncio.create_task(self._rpc.stop_reserving(self._worker_id))
                        ask_at = now + RESERVE_STOP_EVERY
                    wake = cancel_at if asking is not None else min(cancel_at, ask_at)
                    waits: set[asyncio.Future[Any]] = {*left, hurry}
                    if asking is not None:
                        waits.add(asking)
                    await asyncio.wait(waits, timeout=max(0.0, wake - now), return_when=asyncio.FIRST_COMPLETED)
            finally:
                hurry.cancel()
                if asking is not None:
                    if asking.done():
                        self._stop_reserving_answer(asking)
                    else:
                        asking.cancel()
        if reserver.calls:
            if not self._hurry.is_set() and not older_server:
                self.unanswered = True
                log.warning("cancelling %d reserve call(s) still open: the server left StopReserving "
                            "unanswered for %.1fs (it gives back what it had leased for a call it sees "
                            "cancelled)", len(reserver.calls), RESERVE_STOP_TIMEOUT)
            reserver.cancelled = True
            for call in list(reserver.calls):
                call.cancel()  # a no-op for a call whose answer was already taken in
        for task in reserver.tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task

    def _stop_reserving_answer(self, asking: asyncio.Task[int | None]) -> int | None:
        """The ended ``StopReserving`` task's answer: calls woken, ``None`` when the server does
        not know the call, -1 when it got no answer (a failure, logged; the next one is tried)."""
        if asking.cancelled():
            return -1
        exc = asking.exception()
        if exc is not None:
            log.info("stop reserving failed (%s); trying again while reserve calls are open", exc)
            return -1
        woken = asking.result()
        if woken is None:
            log.info("the server has no StopReserving (older than this worker): open reserve calls are "
                     "cancelled after %.2fs", RESERVE_STOP_WAIT)
        return woken

    async def _say_stopped(self) -> None:
        """The stop's last call: ``StopReserving`` with ``stopped`` (see ``STOPPED_DEADLINE``).
        Not sent without a connection, nor when the stop already gave up on the server's answers
        (unreachable or frozen: a stop must not wait for it; the worker goes quiet on the page
        instead)."""
        if self.unanswered or not self._rpc.connected:
            log.debug("not telling the server this worker stopped: %s",
                      "it left calls unanswered" if self.unanswered else "no connection")
            return
        deadline = STOPPED_DEADLINE / 4 if self._hurry.is_set() else STOPPED_DEADLINE
        try:
            await self._rpc.stop_reserving(self._worker_id, deadline, stopped=True)
        except Exception as exc:  # the server gone: the worker goes quiet there instead
            log.debug("could not tell the server this worker stopped: %s", exc)


def abandon_reason(hurried_by: str, *, ended: bool = True) -> str:
    """The error message of a running job the stop releases (kept in its history):
    ``hurried_by`` "" — the grace period ran out — gives "worker stopped before the handler
    finished (shutdown grace exceeded)"; else the hurry is named: "worker stopped by a second
    interrupt (SIGINT) before the handler finished". ``ended`` False: the handler ignored its
    cancellation ("…; the handler did not end")."""
    if not hurried_by:
        return ("worker stopped before the handler finished (shutdown grace exceeded)" if ended
                else "worker stopped; the handler did not end (shutdown grace exceeded)")
    return (f"worker stopped by {hurried_by} before the handler finished" if ended
            else f"worker stopped by {hurried_by}; the handler did not end")


__all__ = ["CANCEL_WAIT", "RESERVE_STOP_EVERY", "RESERVE_STOP_TIMEOUT", "RESERVE_STOP_WAIT",
           "SETTLE_STOP_TIMEOUT", "STOPPED_DEADLINE", "Stopper", "abandon_reason"]
