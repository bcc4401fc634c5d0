"""The worker's handler slots: prefetched jobs, the slots that run them, adaptive prefetch.

Handlers run in *slots*: at most ``concurrency`` long-lived tasks, each running
prefetched jobs one after another (no task per job: creating, scheduling and finishing
one cost more than the runtime's whole remaining work for a no-op job). A slot is
*pulling* while it will look at ``pending`` before it parks; one pulling slot is
enough, so a slot whose handler completes without suspending runs the next job at
once, in the same step. A handler's first step runs inline (``runner.send(coro)``,
``sepp.worker._runners``); only when it suspends is its slot no longer pulling, and
another one is woken (or started) for the jobs still waiting. A handler sees its slot as
``asyncio.current_task()`` throughout (the same task for the jobs its slot runs).

Adaptive prefetch (``prefetch=None``): ``ahead`` — the jobs held beyond the running ones
— doubles when a full ``Reserve`` answer found free slots and nothing prefetched (the
worker ran dry waiting for it), and halves when the oldest prefetched job waited for a
slot longer than ``PREFETCH_MAX_WAIT`` (the worker holds more than it runs).
"""

from __future__ import annotations

import asyncio
import contextvars
import inspect
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable, Coroutine, Generator, Mapping
from types import CoroutineType
from typing import TYPE_CHECKING, Any

from sepp import tracing
from sepp.worker._reports import Reports
from sepp.worker._runners import RETURNED, Raised, Returned, new_runner, resume
from sepp.worker._threads import DaemonThreadPool
from sepp.worker.config import PREFETCH_MAX_WAIT
from sepp.worker.job import Job
from sepp.worker.outcome import COMPLETED, Outcome, no_handler, outcome_for_exception, released, returned
from sepp.worker.registry import Registered

if TYPE_CHECKING:
    from sepp._otel import Process, SeppTracer

log = logging.getLogger("sepp.worker")
_perf_counter = time.perf_counter
_copy_context = contextvars.copy_context


class SlotPool:
    """Prefetched jobs and the slots that run them.

    Args:
        handlers: The registry's handlers by job type (the dict itself: a handler
            registered while running is found).
        threads: Where blocking handlers run.
        reports: Where a finished job's outcome goes (``Reports.finish``).
        concurrency: Most slots (handlers running at once).
        prefetch: Jobs held ahead of the running ones; ``None`` adapts it between 0 and
            ``2 × max_reserve``, starting at ``min(concurrency, 2 × max_reserve)``.
        max_reserve: Most jobs one ``Reserve`` asks for (the adaptive prefetch's range).
        tracer_provider: The job spans' ``TracerProvider`` (``None``: the global one).
        monotonic: Monotonic seconds (the worker's clock).
        result_limits: Each queue's ``max_result_bytes`` as the server last said (queue →
            bytes; the reserver keeps it): a handler's result is checked against its job's
            queue's entry before the ack (none: no local check, the server still checks).

    ``on_room`` (set by the worker: the reserver's ``wake``) is called when slots made room
    for more jobs; ``active`` turns False when the worker stops (slots then end).
    """

    def __init__(self, handlers: dict[str, Registered], threads: DaemonThreadPool, reports: Reports, *,
                 concurrency: int, prefetch: int | None, max_reserve: int, tracer_provider: Any,
                 monotonic: Callable[[], float], result_limits: Mapping[str, int] | None = None) -> None:
        self._handlers = handlers
        self._result_limits: Mapping[str, int] = {} if result_limits is None else result_limits
        self._threads = threads
        self._release = reports.release
        self._finish = reports.finish
        self._concurrency = concurrency
        self._tracer_provider = tracer_provider
        self._monotonic = monotonic
        self._loop = asyncio.get_running_loop()
        self.on_room: Callable[[], None] = _nothing
        #: False once the worker stops: slots end, nothing more is dispatched.
        self.active = True
        #: Set by the stop once it cancels the handlers still running: why, as the release's
        #: error message ("worker stopped before the handler finished (shutdown grace
        #: exceeded)", or the hurry that cut the grace short); None while nothing is abandoned.
        self.abandoning: str | None = None
        #: Prefetched jobs, oldest first (each knows when it arrived: ``Job._reserved_at``).
        self.pending: deque[Job] = deque()
        #: The handler slot of each job running.
        self.running: dict[asyncio.Task[None], Job] = {}
        #: Prefetch now; adapted between 0 and ``ahead_max`` when ``prefetch`` is None.
        self.adaptive = prefetch is None
        self.ahead_max = 2 * max_reserve if prefetch is None else prefetch
        self.ahead = min(concurrency, self.ahead_max) if prefetch is None else prefetch
        self._shrunk_at = 0.0
        #: Handler slots alive, those that will look at ``pending`` before they park, and
        #: the parked ones with the future that wakes each.
        self.slots: set[asyncio.Task[None]] = set()
        #: Handler runners (``run_handlers``) not inside a handler: one is taken per job, and
        #: given back once its handler ended (a handler that suspends keeps its own).
        self._runners: list[Generator[Any, Any, None]] = []
        self._pulling: set[asyncio.Task[None]] = set()
        self._idle: list[tuple[asyncio.Task[None], asyncio.Future[None]]] = []

    def add(self, jobs: list[Job], asked: int) -> None:
        """Take in ``jobs``, the answer to a ``Reserve`` that asked for ``asked``, and have a
        slot run them. Adaptive prefetch: a full answer that finds free slots and nothing
        prefetched doubles ``ahead`` (the worker ran dry waiting for it)."""
        if (self.adaptive and len(jobs) >= asked and not self.pending
                and len(self.running) < self._concurrency):
            self.ahead = min(self.ahead_max, max(2 * self.ahead, 1))
        self.pending.extend(jobs)
        self._dispatch()

    def take_pending(self) -> list[Job]:
        """The prefetched jobs that never started, oldest first; none is left here."""
        pending = list(self.pending)
        self.pending.clear()
        return pending

    def wake_idle(self) -> None:
        """Let every parked slot see that the worker stops (it ends)."""
        idle, self._idle = self._idle, []
        for _, wake in idle:
            if not wake.done():
                wake.set_result(None)

    def _dispatch(self) -> None:
        """Make sure a slot will take the prefetched jobs: wake a parked one, or start one
        (up to ``concurrency``), unless one is pulling already."""
        if self._pulling or not self.pending or not self.active:
            return
        idle = self._idle
        while idle:
            slot, wake = idle.pop()
            if not wake.done():  # a slot cancelled while parked has no future left to wake
                self._pulling.add(slot)
                wake.set_result(None)
                return
        if len(self.slots) < self._concurrency:
            slot = self._loop.create_task(self._slot(), name="sepp-handler-slot")
            self.slots.add(slot)
            self._pulling.add(slot)
            slot.add_done_callback(self._slot_ended)
        # else every slot is inside a suspended handler: the first to return takes the next job

    def _suspending(self, slot: asyncio.Task[None]) -> None:
        """``slot``'s handler is about to wait: another slot takes the jobs still pending, and
        the reservers hear of the room the jobs run before it made."""
        self._pulling.discard(slot)
        if not self._pulling and self.pending:
            self._dispatch()
        self.on_room()

    def _shrink_ahead(self, now: float) -> None:
        """Adaptive prefetch: halve it when the oldest prefetched job waited for a slot for
        more than ``PREFETCH_MAX_WAIT`` seconds (the worker holds more than it runs)."""
        pending = self.pending
        if pending and now - pending[0]._reserved_at > PREFETCH_MAX_WAIT and now - self._shrunk_at > PREFETCH_MAX_WAIT:
            self.ahead //= 2
            self._shrunk_at = now

    async def _slot(self) -> None:
        """One handler slot: runs prefetched jobs one after another, parks when none is left,
        ends once the worker stops (and after a job that left a cancellation on it: the
        next job gets a fresh slot)."""
        me = asyncio.current_task(self._loop)
        assert me is not None
        pending, running, pulling, idle = self.pending, self.running, self._pulling, self._idle
        execute, execute_traced, provider = self._execute, self._execute_traced, self._tracer_provider
        monotonic = self._monotonic
        while self.active:
            if not pending:
                wake: asyncio.Future[None] = self._loop.create_future()
                idle.append((me, wake))
                pulling.discard(me)
                await wake  # set by _dispatch (which counts this slot as pulling again) or at stop
                continue
            tracer = tracing.tracer(provider)  # looked up again after each park
            while pending and self.active:
                if self.adaptive:
                    self._shrink_ahead(monotonic())
                job = pending.popleft()
                running[me] = job
                try:
                    if tracer is None:
                        rest = execute(job, me)
                        if rest is not None:
                            await rest
                    else:
                        await execute_traced(job, tracer, me)
                except Exception:
                    log.exception("internal error running a job")
                # A handler that suspended counts as pulling again once it returned (_execute_rest).
                del running[me]
                if me.cancelling() or getattr(me, "_must_cancel", False):
                    return  # a cancellation the job left behind must not reach the next one (_slot_ended)
            # The reservers run only once this slot waits: telling them of the room made by
            # the jobs just run at the end of the run is as early as telling them after each.
            self.on_room()

    def _slot_ended(self, slot: asyncio.Task[None]) -> None:
        self.slots.discard(slot)
        self._pulling.discard(slot)
        if not slot.cancelled() and slot.exception() is not None:
            log.error("internal error in a handler slot", exc_info=slot.exception())
        self.running.pop(slot, None)  # ended inside a job, without reaching its settle
        self.on_room()
        self._dispatch()

    async def _execute_traced(self, job: Job, tracer: SeppTracer, me: asyncio.Task[None]) -> None:
        """``_execute`` inside the job's ``process <queue>`` span (``tracer``: a ``SeppTracer``)."""
        with tracer.process(job) as span:
            rest = self._execute(job, me, span)
            if rest is not None:
                await rest

    def _execute(self, job: Job, me: asyncio.Task[None],
                 span: Process | None = None) -> Coroutine[Any, Any, None] | None:
        """Run ``job``'s handler in slot ``me`` and settle its outcome, as far as that goes
        without waiting: returns ``None`` when the job is done (no handler, or an async one
        that never suspended), else a coroutine that finishes it, which the slot awaits at
        once (a handler that suspended, a blocking one, an awaitable of another kind).
        ``span`` (tracing's ``Process``, or ``None``) is told the outcome and the handler's
        exception."""
        started = _perf_counter()
        registered = self._handlers.get(job._job.job_type)  # (job.job_type without the property call)
        if registered is None:
            self._finish(job, no_handler(job.job_type), None, span, started)
            return None
        if not registered.is_async:
            return self._execute_rest(job, me, span, started, self._blocking(registered.fn, job))
        outcome: Outcome
        error: BaseException | None = None
        try:
            coro = registered.fn(job)
            if type(coro) is not CoroutineType:  # some other awaitable: assume it suspends
                return self._execute_rest(job, me, span, started, coro)
            # Its first step inline: a handler that never suspends is done here. Each job's
            # steps run in a context of its own (a copy of the slot's, as a task per job would
            # have had): a context variable a handler sets is not seen by the next job of the slot.
            runners = self._runners
            runner = runners.pop() if runners else new_runner()
            ctx = _copy_context()
            first = ctx.run(runner.send, coro)
            if first is RETURNED:
                runners.append(runner)
                outcome = COMPLETED
            elif type(first) is Returned:
                runners.append(runner)
                outcome = self._returned(job, first.value)
            elif type(first) is Raised:
                runners.append(runner)
                outcome, error = self._failure(first.exc, me)
            else:
                return self._execute_rest(job, me, span, started, self._resumed(runner, first, ctx))
        except BaseException as exc:  # raised calling the handler (a wrong signature, say)
            outcome, error = self._failure(exc, me)
        self._finish(job, outcome, error, span, started)
        return None

    async def _execute_rest(self, job: Job, me: asyncio.Task[None], span: Process | None, started: float,
                            rest: Awaitable[Any]) -> None:
        """``_execute`` of a job whose handler waits: ``rest`` finishes it."""
        error: BaseException | None = None
        try:
            self._suspending(me)
            try:
                value = await rest
            finally:
                self._pulling.add(me)
            outcome = COMPLETED if value is None else self._returned(job, value)
        except BaseException as exc:  # KeyboardInterrupt/SystemExit raised by a handler: a failure too
            outcome, error = self._failure(exc, me)
        self._finish(job, outcome, error, span, started)

    def _returned(self, job: Job, value: Any) -> Outcome:
        """The outcome of ``job``'s handler that returned ``value`` (not None): an ack carrying
        it as the result, or a dead-letter (not JSON-encodable) or a failed attempt (over the
        queue's ``max_result_bytes``): ``outcome.returned``."""
        return returned(value, self._result_limits.get(job._job.queue))

    async def _resumed(self, runner: Generator[Any, Any, None], first: Any, ctx: contextvars.Context) -> Any:
        """Finish the handler that suspended in ``runner`` yielding ``first``; return what it
        returned, raise what it raised."""
        ended = await resume(runner, first, ctx)
        self._runners.append(runner)  # it ended the handler: free for the next one
        if type(ended) is Raised:
            raise ended.exc
        return ended.value if type(ended) is Returned else None

    async def _blocking(self, fn: Callable[[Job], Any], job: Job) -> Any:
        """Run the blocking handler ``fn`` in a thread (and await what it returns, if awaitable);
        return what it returned (what the awaitable gave, for one). A coroutine it returns runs
        in a context of its own (a copy of the slot's), as an async handler's steps do: a
        context variable it sets is not seen by the next job of the slot."""
        result = await self._threads.run(fn, job)
        if type(result) is CoroutineType:
            runners = self._runners
            runner = runners.pop() if runners else new_runner()
            ctx = _copy_context()
            first = ctx.run(runner.send, result)
            if first is RETURNED or type(first) is Raised or type(first) is Returned:
                runners.append(runner)
                if type(first) is Raised:
                    raise first.exc
                return first.value if type(first) is Returned else None
            return await self._resumed(runner, first, ctx)
        if inspect.isawaitable(result):
            return await result
        return result

    def _failure(self, exc: BaseException, me: asyncio.Task[None]) -> tuple[Outcome, BaseException | None]:
        """The outcome of a handler of slot ``me`` that raised ``exc``, and the error to record."""
        if isinstance(exc, asyncio.CancelledError):
            if self.abandoning is not None:
                me.uncancel()
                return released(self.abandoning), None
            # The handler raised CancelledError of its own, or a cancellation the runtime did
            # not ask for landed in it: its handler's own (it cancelled its task), or one a job
            # before it on this slot left to land later. A failure like any other: the job is
            # settled, never left held by no one. A cancel count left on the slot ends it after
            # this job (``_slot``).
        return outcome_for_exception(exc), exc


def _nothing() -> None:
    """``SlotPool.on_room`` until the worker sets it."""


__all__ = ["SlotPool"]
