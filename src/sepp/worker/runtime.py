"""``Worker``: reserve jobs, run their handlers, settle them; drain cleanly on SIGTERM.

::

    worker = Worker("127.0.0.1:7700", queues=["emails"], concurrency=8)

    @worker.handler("welcome")
    async def welcome(job: Job) -> None:
        await send_mail(job.json()["user_id"])

    worker.run_sync()          # or: await worker.run()

Loop: one reserver long-polls ``Reserve`` for as many jobs as there is room for
(``concurrency + prefetch − running − prefetched``); while prefetched jobs are still
waiting it asks only once there is room for a worthwhile batch (half the room, or a full
``max_reserve``), and a second reserver keeps another full batch in flight when the room
allows two. Jobs start as soon as a slot is free, and a slot is free as soon as its handler
returns (the outcome is settled in the background); a lease keeper extends every held
job's lease at a third of its length; outcomes are settled in batches (one ``Settle`` call
for the jobs that finish together). The default ``prefetch=None`` adapts the prefetch to
the jobs (see :class:`~sepp.worker.WorkerConfig`). See :mod:`sepp.worker.outcome` for
what a handler's return or exception means.

Handlers run in at most ``concurrency`` long-lived *slot* tasks, not in a task per job
(creating, scheduling and ending a task cost more than the rest of the
runtime's work for a short job). An async handler's first step runs inline in its slot, so
a handler that never suspends is done without a task switch, and its slot runs the next
job at once; one that suspends hands the jobs still waiting to another slot. Inside a
handler ``asyncio.current_task()`` is its slot: the same task before and after it
suspends (``asyncio.timeout``, ``TaskGroup`` work as usual), shared with the other jobs
the slot runs one after another. Context variables are per job: each job's handler runs
in a copy of the slot's context, as a task per job would (what one job sets, the next one
does not see). A job that leaves a cancellation pending on its slot (its handler cancelled
its own task and returned) ends the slot; the next job gets a fresh one.

Graceful stop (``stop()``, SIGTERM, SIGINT): stop reserving — ask the server to end this
worker's long-polls (``StopReserving``, repeated every ``RESERVE_STOP_EVERY`` while a call is
open), let every ``Reserve`` in flight finish and release what it brings; a call is cancelled
only on a second signal, once the server left ``StopReserving`` unanswered for
``RESERVE_STOP_TIMEOUT``, or after ``RESERVE_STOP_WAIT`` against a server without
``StopReserving``; release (nack
``release``: the attempt is given back) every prefetched job not started;
let running handlers finish within ``shutdown_grace``; then cancel async handlers
still running and release their jobs (a blocking handler's thread cannot be stopped:
its job is released too and its result ignored). A second signal skips the grace.
Last, wait for the acks and releases the server has not answered yet: as long as it
answers, or up to ``SETTLE_STOP_TIMEOUT`` past its last answer; a second signal gives up at
once what is being re-sent. What is given up (logged at WARNING with its count) comes back
after its lease. The very last call says the session is over (``StopReserving`` with
``stopped``, deadline ``STOPPED_DEADLINE``, only over a connection the channel holds and
unless the stop gave up on the server's answers; its failure is only logged at DEBUG), so
``sepp workers list`` and the Workers page show the worker as stopped at once instead of live
until it goes quiet.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import datetime as dt
import inspect
import logging
import math
import signal
import threading
import time
import types
from collections import deque
from collections.abc import Awaitable, Callable, Coroutine, Generator, Iterable
from dataclasses import dataclass, replace
from functools import partial
from types import CoroutineType
from typing import TYPE_CHECKING, Any, TypeVar

import grpc

from sepp import tracing
from sepp.api.v1.worker_pb2 import SettleResult
from sepp.client.auth import token_metadata
from sepp.client.tls import PathArg
from sepp.domain.states import STATE_NAMES
from sepp.errors import PermissionDenied, RejectedError, TransportError, Unauthenticated
from sepp.rejections import Reason
from sepp.worker._failures import FailureLog
from sepp.worker._lease import LeaseKeeper
from sepp.worker._rpc import WorkerRpc
from sepp.worker._settler import Abandoned, Settled, Settler
from sepp.worker._threads import DaemonThreadPool
from sepp.worker.config import DEFAULT_TARGET, PREFETCH_MAX_WAIT, WorkerConfig, queue_tuple
from sepp.worker.job import Job, timestamp_to_datetime
from sepp.worker.outcome import COMPLETED, Outcome, OutcomeKind, no_handler, outcome_for_exception, released
from sepp.worker.registry import HandlerRegistry

if TYPE_CHECKING:
    from sepp._otel import Process, SeppTracer

log = logging.getLogger("sepp.worker")
_perf_counter = time.perf_counter
_copy_context = contextvars.copy_context
H = TypeVar("H", bound=Callable[..., Any])

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
#: Longest pause, seconds, between a failed ``Reserve`` and the next try (0.05 s doubling up
#: to this). The pause ends early once the channel connects again (``WorkerRpc.pause``), so
#: after a server restart the next try goes out as soon as gRPC's reconnect backoff (100 ms
#: to 1 s) finds the server; the pause itself only paces a server that answers with errors.
RESERVE_RETRY_MAX = 2.0
#: Seconds a stop waits for acks and releases after the handlers are done, counted from the
#: last ``Settle`` the server answered: against a server that stopped answering, what is still
#: unsent is then given up (its jobs come back after their lease). A second signal gives it up
#: at once (``Settler.flush``'s hurry).
SETTLE_STOP_TIMEOUT = 10.0
#: Seconds a stop waits for the handlers it cancelled (past the grace period) to end; a
#: handler that swallows the cancellation is still running then, and its job is released.
CANCEL_WAIT = 5.0


#: What a handler runner (``_run_handlers``) yields once the handler it ran returned.
_RETURNED: Any = object()


class _Raised:
    """What a handler runner (``_run_handlers``) yields once the handler it ran raised ``exc``."""

    __slots__ = ("exc",)

    def __init__(self, exc: BaseException) -> None:
        self.exc = exc


@types.coroutine
def _run_handlers() -> Generator[Any, Any, None]:
    """Run the handler coroutines sent in, one after another, as ``await coro`` would
    (``yield from``, PEP 380). ``runner.send(coro)`` runs ``coro``'s first step and returns
    what it yields when it suspends — its later steps are the runner's (``send``/``throw``,
    forwarded to ``coro``: ``_resume``) — or, once it ended, ``_RETURNED`` or a ``_Raised``
    holding its exception; then the runner waits for the next coroutine. Unlike
    ``coro.send(None)``, a handler that returns raises no ``StopIteration`` (catching it was
    about a third of the runtime's cost of a no-op handler's first step). Start one with
    ``send(None)``; closing it closes the coroutine it is in (``GeneratorExit`` is not
    caught)."""
    coro = yield None
    while True:
        ended: Any
        try:
            yield from coro
            ended = _RETURNED
        except GeneratorExit:
            raise
        except BaseException as exc:  # the handler's failure, told (not raised) to the caller
            ended = _Raised(exc)
        coro = yield ended  # (yielded outside the except block: no __context__ for the next job)
        ended = None


def _new_runner() -> Generator[Any, Any, None]:
    """A started ``_run_handlers``."""
    runner = _run_handlers()
    runner.send(None)
    return runner


@types.coroutine
def _resume(runner: Generator[Any, Any, None], first: Any,
            ctx: contextvars.Context | None = None) -> Generator[Any, Any, Any]:
    """Finish the handler coroutine whose first step ``runner`` (a ``_run_handlers``) ran and
    which yielded ``first``, as ``await coro`` would: what the task sends or throws in goes
    on to the handler (through ``runner``) and what it yields goes out to the task (``yield
    from``, PEP 380). With ``ctx``, every step runs in that context (``Context.run``), as
    each step of a task runs in the task's own context. Returns ``runner``'s end marker
    (``_RETURNED`` or a ``_Raised``) once the handler ended; ``runner`` may then run the
    next one."""
    send: Callable[[Any], Any] = runner.send
    throw: Callable[[BaseException], Any] = runner.throw
    if ctx is not None:
        run = ctx.run

        def send(value: Any) -> Any:
            return run(runner.send, value)

        def throw(exc: BaseException) -> Any:
            return run(runner.throw, exc)

    yielded = first
    while True:
        try:
            sent = yield yielded
        except GeneratorExit:
            runner.close()
            raise
        except BaseException as exc:  # a cancellation thrown in by the task, as a rule
            yielded = throw(exc)
        else:
            yielded = send(sent)
        if yielded is _RETURNED or type(yielded) is _Raised:
            return yielded


@dataclass(frozen=True, slots=True)
class JobReport:
    """What happened to one job this worker held; passed to ``on_outcome`` hooks.

    Attributes:
        job: The job.
        outcome: What the worker asked for: ``completed``, ``retry``, ``retry_after``,
            ``dead_letter`` or ``released``.
        state: Where the server put the job: ``completed``, ``scheduled``, ``ready``,
            ``dead_lettered`` (a retry on the last attempt lands here), or ``""`` when the
            settle was refused or failed.
        duration: Seconds the handler ran (0 for jobs released before they started).
        error: The error message recorded with a nack ("" for a completed job).
        run_at: When a retried job runs next (aware UTC), else ``None``.
        refused: Why the settle did not apply: a lease reason (``LEASE_MISMATCH``,
            ``LEASE_EXPIRED``, ``JOB_NOT_FOUND``) or a transport error; "" when it applied.
    """

    job: Job
    outcome: OutcomeKind
    state: str
    duration: float
    error: str = ""
    run_at: dt.datetime | None = None
    refused: str = ""


OutcomeHook = Callable[[JobReport], None]


class Worker:
    """A sepp worker: handlers by job type, run with a concurrency limit (see module docstring).

    Args:
        target: ``host:port`` of the server (default ``127.0.0.1:7700``).
        queues: Queue names to reserve from, in order (a ``"a,b"`` string works too).
        concurrency, prefetch, lease_duration, shutdown_grace, worker_id, poll_wait,
        max_reserve, settle_batch: See :class:`~sepp.worker.WorkerConfig`.
        token: The secret of a token with role ``work``, sent as
            ``authorization: Bearer``; ``None`` reads ``$SEPP_TOKEN``, ``""`` sends none. A
            refused token stops the worker: ``run()`` raises ``Unauthenticated`` or
            ``PermissionDenied`` (never retried).
        tls_ca, tls_cert, tls_key: TLS from PEM files: the CA of the server's
            certificate; the worker's certificate and key for mutual TLS.
        tracer_provider: An OpenTelemetry ``TracerProvider`` (``pip install sepp[otel]``) to
            record a ``process <queue>`` span per job with; ``None`` = the global one, used
            only once the application set one (``sepp._otel``, docs/operations.md
            "Tracing"). Without it nothing is recorded and OpenTelemetry is not imported.

    Raises ``ValueError`` for an invalid setting (a TLS file that cannot be read or used too).
    """

    def __init__(self, target: str = DEFAULT_TARGET, queues: str | Iterable[str] = (), *,
                 concurrency: int = 10, prefetch: int | None = None, lease_duration: float | None = None,
                 shutdown_grace: float = 30.0, worker_id: str = "", poll_wait: float = 5.0,
                 max_reserve: int = 256, settle_batch: int = 256, token: str | None = None,
                 tls_ca: PathArg | None = None, tls_cert: PathArg | None = None,
                 tls_key: PathArg | None = None, tracer_provider: Any = None) -> None:
        #: The token's metadata; kept out of ``config`` so printing it shows no secret.
        self._auth_metadata = token_metadata(token)
        #: An auth refusal that stopped the worker; ``run()`` raises it after the drain.
        self._fatal: TransportError | None = None
        #: The OpenTelemetry ``TracerProvider`` of the job spans; ``None`` = the global one.
        self.tracer_provider = tracer_provider
        self.config = WorkerConfig(target, queue_tuple(queues), concurrency, prefetch, lease_duration,
                                   shutdown_grace, worker_id, poll_wait, max_reserve, settle_batch,
                                   tls_ca=tls_ca, tls_cert=tls_cert, tls_key=tls_key)
        self.registry = HandlerRegistry()
        self._hooks: list[OutcomeHook] = []
        self._phase = "new"  # new → running → stopping → stopped (or new → stopped: stop() first)
        #: Whether ``run()`` was called (a stop before it leaves the first call a no-op).
        self._ran = False
        #: Prefetched jobs, oldest first (each knows when it arrived: ``Job._reserved_at``).
        self._pending: deque[Job] = deque()
        #: The handler slot of each job running (see "running" below).
        self._running: dict[asyncio.Task[None], Job] = {}
        #: Outcomes submitted whose verdict has not come back yet (their slot is already free).
        self._settling = 0
        #: Counters by outcome plus ``reserved`` (jobs), ``reserve_calls`` (answered ``Reserve``
        #: calls) and ``refused`` (metrics, tests).
        self.stats: dict[str, int] = dict.fromkeys(
            ("reserved", "reserve_calls", "completed", "retry", "retry_after", "dead_letter", "released",
             "refused"), 0)

    # ------------------------------------------------------------------ setup

    def handler(self, job_type: str) -> Callable[[H], H]:
        """Decorator registering an (async or plain) function for ``job_type``.

        Raises ``ValueError`` when ``job_type`` already has a handler.
        """
        return self.registry.handler(job_type)

    def register(self, job_type: str, fn: H) -> H:
        """Register ``fn`` for ``job_type``; returns ``fn``. Raises like :meth:`handler`."""
        return self.registry.register(job_type, fn)

    def on_outcome(self, hook: OutcomeHook) -> OutcomeHook:
        """Call ``hook(report)`` (on the loop, must not block) after each job is settled."""
        self._hooks.append(hook)
        return hook

    def configure(self, **changes: Any) -> WorkerConfig:
        """Replace settings (``WorkerConfig`` field names) before ``run``; returns the new config.

        Raises ``RuntimeError`` once running, ``TypeError`` for an unknown name and
        ``ValueError`` for an invalid value.
        """
        if self._phase != "new":
            raise RuntimeError("configure() must be called before the worker runs")
        self.config = replace(self.config, **changes)
        return self.config

    def use_token(self, token: str | None) -> None:
        """Send ``token`` (role ``work``) instead of the one given to the constructor;
        ``None`` reads ``$SEPP_TOKEN``. Call before ``run``: raises ``RuntimeError`` once
        running and ``ValueError`` for a token that is not printable ASCII."""
        if self._phase != "new":
            raise RuntimeError("use_token() must be called before the worker runs")
        self._auth_metadata = token_metadata(token)

    @property
    def running(self) -> bool:
        """True from ``run()`` until the graceful stop has finished."""
        return self._phase in ("running", "stopping")

    @property
    def prefetch(self) -> int:
        """Jobs the worker may hold ahead of its running ones right now (the adapted value
        when ``config.prefetch`` is None; ``config.prefetch`` otherwise)."""
        if self._phase == "new":
            return self.config.concurrency if self.config.prefetch is None else self.config.prefetch
        return self._ahead

    @property
    def held(self) -> int:
        """Jobs held right now: running, prefetched, or done and being settled."""
        return len(self._running) + len(self._pending) + self._settling

    # ------------------------------------------------------------------ lifecycle

    def _setup(self) -> None:
        cfg = self.config
        if not cfg.queues:
            raise ValueError("the worker has no queues to reserve from")
        self._rpc = WorkerRpc(cfg.target, credentials=cfg.credentials(), metadata=self._auth_metadata,
                              worker_id=cfg.worker_id, concurrency=cfg.concurrency)
        self._settler = Settler(self._rpc, max_batch=cfg.settle_batch, on_verdicts=self._settled_batch)
        self._keeper = LeaseKeeper(self._rpc, cfg.lease_duration)
        self._threads = DaemonThreadPool(cfg.concurrency, "sepp-handler")
        self._loop = asyncio.get_running_loop()
        #: The registry's handlers by job type, looked up once per job (the dict itself:
        #: a handler registered while running is found).
        self._handlers = self.registry._handlers
        self._room = asyncio.Event()
        self._hurry = asyncio.Event()
        self._done = asyncio.Event()
        #: Reserve calls in flight, and the jobs they asked for.
        self._reserve_calls: set[Any] = set()
        self._asking = 0
        #: Prefetch now; adapted between 0 and ``_ahead_max`` when ``prefetch`` is None.
        self._adaptive = cfg.prefetch is None
        self._ahead_max = 2 * cfg.max_reserve if cfg.prefetch is None else cfg.prefetch
        #: Most jobs one Reserve asks for: ``max_reserve``, lowered to the server's cap
        #: (``max_reserve_batch``) once a refusal names it (``_lower_reserve_cap``).
        self._max_reserve = cfg.max_reserve
        self._ahead = min(cfg.concurrency, self._ahead_max) if cfg.prefetch is None else cfg.prefetch
        self._shrunk_at = 0.0
        #: Reservers waiting on ``_room``, and how many there are.
        self._parked = 0
        self._lanes = 1
        self._reserve_cancelled = False
        #: The stop gave up on the server's answers (StopReserving or acks unanswered): its
        #: last call (``_say_stopped``) is not sent, it would only wait out its deadline.
        self._unanswered = False
        self._abandoning = False
        #: Handler slots alive, those that will look at ``_pending`` before they park, and
        #: the parked ones with the future that wakes each.
        self._slots: set[asyncio.Task[None]] = set()
        #: Handler runners (``_run_handlers``) not inside a handler: one is taken per job, and
        #: given back once its handler ended (a handler that suspends keeps its own).
        self._runners: list[Generator[Any, Any, None]] = []
        self._pulling: set[asyncio.Task[None]] = set()
        self._idle: list[tuple[asyncio.Task[None], asyncio.Future[None]]] = []
        self._reservers: list[asyncio.Task[None]] = []
        self._shutdown_task: asyncio.Task[None] | None = None
        self._signals: list[signal.Signals] = []
        self._signal_count = 0

    async def run(self, *, install_signal_handlers: bool = True) -> None:
        """Run until ``stop()`` (or SIGTERM/SIGINT when ``install_signal_handlers`` and on the
        main thread), then drain gracefully. Raises ``Unauthenticated`` / ``PermissionDenied``
        after the drain when the server refused the worker's token, ``RuntimeError`` if already run and
        ``ValueError`` when no queue is configured. After a ``stop()`` that came before it (a
        ``create_task(worker.run())`` stopped before the task ran), the first ``run()``
        returns at once without connecting."""
        if self._phase == "stopped" and not self._ran:
            self._ran = True
            log.info("worker %s: stopped before it ran", self.config.worker_id)
            return
        if self._phase != "new":
            raise RuntimeError("a Worker runs once; create another one")
        self._ran = True
        self._setup()
        self._phase = "running"
        cfg = self.config
        log.info("worker %s: queues=%s concurrency=%d prefetch=%s target=%s handlers=%s",
                 cfg.worker_id, ",".join(cfg.queues), cfg.concurrency,
                 "auto" if cfg.prefetch is None else cfg.prefetch, cfg.target,
                 ",".join(self.registry) or "-")
        if install_signal_handlers:
            self._install_signals()
        # A second lane keeps a Reserve in flight while the first one's answer is on its way,
        # when there may be room for two full batches (concurrency + prefetch ≥ 2 × max_reserve).
        self._lanes = 2 if cfg.concurrency + self._ahead_max >= 2 * cfg.max_reserve else 1
        self._reservers = [asyncio.create_task(self._reserve_loop(lane), name=f"sepp-reserver-{lane}")
                           for lane in range(self._lanes)]
        try:
            await self._done.wait()
        finally:
            self._remove_signals()
            if not self._done.is_set():  # run() itself was cancelled: still drain
                await asyncio.shield(self._begin_stop(cfg.shutdown_grace))
        if self._fatal is not None:
            raise self._fatal

    def run_sync(self, *, install_signal_handlers: bool = True) -> None:
        """Blocking ``run()`` in a new event loop (uvloop when installed)."""
        factory: Any = None
        with contextlib.suppress(ImportError):
            import uvloop

            factory = uvloop.new_event_loop
        loop: asyncio.AbstractEventLoop = factory() if factory is not None else asyncio.new_event_loop()
        try:
            loop.run_until_complete(self.run(install_signal_handlers=install_signal_handlers))
        finally:
            # Unlike asyncio.run, do not wait forever for tasks that ignore cancellation
            # (a handler swallowing CancelledError): give them a moment, then close.
            pending = [t for t in asyncio.all_tasks(loop) if not t.done()]
            for task in pending:
                task.cancel()
            if pending:
                loop.run_until_complete(asyncio.wait(pending, timeout=1.0))
            with contextlib.suppress(Exception):
                loop.run_until_complete(loop.shutdown_asyncgens())
            loop.close()

    async def stop(self, grace: float | None = None) -> None:
        """Stop gracefully and wait until done (``grace`` defaults to ``shutdown_grace``).

        A second call with ``grace=0`` hurries a stop already in progress (as a second signal
        does): running handlers are cancelled and their jobs released, and acks and releases
        the server is not answering are given up at once (``SETTLE_STOP_TIMEOUT`` bounds that
        wait otherwise). Before ``run()`` nothing runs yet: the worker is marked stopped, and
        the first ``run()`` then returns at once (it raised ``RuntimeError`` before). A no-op
        after the stop finished.
        """
        if self._phase == "new":
            self._phase = "stopped"
            return
        if self._phase == "stopped":
            return
        if grace is not None and grace <= 0:
            self._hurry.set()
        await asyncio.shield(self._begin_stop(self.config.shutdown_grace if grace is None else grace))

    def _begin_stop(self, grace: float) -> asyncio.Task[None]:
        if self._shutdown_task is None:
            self._phase = "stopping"
            self._shutdown_task = asyncio.create_task(self._shutdown(grace), name="sepp-worker-stop")
        return self._shutdown_task

    def _install_signals(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            try:
                loop.add_signal_handler(sig, self._on_signal, sig)
                self._signals.append(sig)
            except (NotImplementedError, RuntimeError, ValueError):  # pragma: no cover - not on this platform
                pass

    def _remove_signals(self) -> None:
        loop = asyncio.get_running_loop()
        for sig in self._signals:
            with contextlib.suppress(Exception):
                loop.remove_signal_handler(sig)
        self._signals.clear()

    def _on_signal(self, sig: signal.Signals) -> None:
        self._signal_count += 1
        if self._signal_count == 1:
            log.info("%s: stopping (grace %.1fs; send again to stop at once)", sig.name,
                     self.config.shutdown_grace)
            self._begin_stop(self.config.shutdown_grace)
        else:
            log.warning("%s again: releasing running jobs now", sig.name)
            self._hurry.set()

    # ------------------------------------------------------------------ reserving

    def _want(self, lane: int) -> int:
        """How many jobs lane ``lane`` should ask for now (0: none)."""
        most = self._max_reserve
        capacity = self.config.concurrency + self._ahead
        want = capacity - len(self._running) - len(self._pending) - self._asking
        if want <= 0:
            return 0
        if lane > 0:  # the second lane only ever asks for a full batch
            return most if want >= most else 0
        if self._pending and want < min(most, capacity // 2):
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
                        "than that (max_reserve is %d)", limit, self.config.max_reserve)
            self._max_reserve = limit
        return True

    def _wake_reservers(self) -> None:
        """Wake the reservers parked on ``_room`` when one of them now has something to ask."""
        if self._parked and (self._want(0) > 0 or (self._lanes > 1 and self._want(1) > 0)):
            self._room.set()

    async def _reserve_loop(self, lane: int = 0) -> None:
        cfg = self.config
        backoff = 0.05
        failures = FailureLog(log, "reserve")
        while self._phase == "running":
            ask = self._want(lane)
            if ask <= 0:
                self._room.clear()
                self._parked += 1
                try:
                    await self._room.wait()
                finally:
                    self._parked -= 1
                continue
            call = self._rpc.reserve_call(cfg.queues, ask, cfg.poll_wait, cfg.worker_id, cfg.lease_duration)
            self._reserve_calls.add(call)
            self._asking += ask
            try:
                resp = await call
            except asyncio.CancelledError:
                if self._reserve_cancelled:
                    return  # stop() cancelled the long-poll
                raise
            except Exception as exc:  # transport errors; anything else is logged, never fatal to the loop
                if self._phase != "running":
                    return
                if isinstance(exc, grpc.RpcError):
                    error = self._rpc.convert(exc)
                    if isinstance(error, Unauthenticated | PermissionDenied):  # never retried
                        log.error("reserve refused, stopping the worker: %s", error)
                        self._fatal = error
                        self._begin_stop(cfg.shutdown_grace)
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
                self._reserve_calls.discard(call)
                self._asking -= ask
                self._room.set()  # the other lane may now ask
            backoff = 0.05
            failures.worked()
            self._rpc.answered()
            self.stats["reserve_calls"] += 1
            if not resp.reservations:
                continue
            now = time.monotonic()
            jobs = [Job(r, now) for r in resp.reservations]
            self.stats["reserved"] += len(jobs)
            self._keeper.track_all(jobs)
            if self._phase != "running":
                self._release(jobs, "worker stopping: reservation arrived after stop")
                return
            if (self._adaptive and len(jobs) >= ask and not self._pending
                    and len(self._running) < cfg.concurrency):
                # A full answer found free slots and nothing prefetched: the worker ran dry
                # waiting for it, so hold more ahead next time.
                self._ahead = min(self._ahead_max, max(2 * self._ahead, 1))
            self._pending.extend(jobs)
            self._dispatch()

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
        while self._phase == "running":
            self._room.clear()
            await self._room.wait()

    # ------------------------------------------------------------------ running
    #
    # Handlers run in *slots*: at most ``concurrency`` long-lived tasks, each running
    # prefetched jobs one after another (no task per job: creating, scheduling and finishing
    # one cost more than the runtime's whole remaining work for a no-op job). A slot is
    # *pulling* while it will look at ``_pending`` before it parks; one pulling slot is
    # enough, so a slot whose handler completes without suspending runs the next job at
    # once, in the same step. A handler's first step runs inline (``coro.send(None)``);
    # only when it suspends is its slot no longer pulling, and another one is woken (or
    # started) for the jobs still waiting. A handler sees its slot as
    # ``asyncio.current_task()`` throughout (the same task for the jobs its slot runs).

    def _dispatch(self) -> None:
        """Make sure a slot will take the prefetched jobs: wake a parked one, or start one
        (up to ``concurrency``), unless one is pulling already."""
        if self._pulling or not self._pending or self._phase != "running":
            return
        idle = self._idle
        while idle:
            slot, wake = idle.pop()
            if not wake.done():  # a slot cancelled while parked has no future left to wake
                self._pulling.add(slot)
                wake.set_result(None)
                return
        if len(self._slots) < self.config.concurrency:
            slot = self._loop.create_task(self._slot(), name="sepp-handler-slot")
            self._slots.add(slot)
            self._pulling.add(slot)
            slot.add_done_callback(self._slot_ended)
        # else every slot is inside a suspended handler: the first to return takes the next job

    def _suspending(self, slot: asyncio.Task[None]) -> None:
        """``slot``'s handler is about to wait: another slot takes the jobs still pending, and
        the reservers hear of the room the jobs run before it made."""
        self._pulling.discard(slot)
        if not self._pulling and self._pending:
            self._dispatch()
        self._wake_reservers()

    def _shrink_ahead(self, now: float) -> None:
        """Adaptive prefetch: halve it when the oldest prefetched job waited for a slot for
        more than ``PREFETCH_MAX_WAIT`` seconds (the worker holds more than it runs)."""
        pending = self._pending
        if pending and now - pending[0]._reserved_at > PREFETCH_MAX_WAIT and now - self._shrunk_at > PREFETCH_MAX_WAIT:
            self._ahead //= 2
            self._shrunk_at = now

    async def _slot(self) -> None:
        """One handler slot: runs prefetched jobs one after another, parks when none is left,
        ends once the worker stops (and after a job that left a cancellation on it: the
        next job gets a fresh slot)."""
        me = asyncio.current_task(self._loop)
        assert me is not None
        pending, running, pulling, idle = self._pending, self._running, self._pulling, self._idle
        execute, execute_traced, provider = self._execute, self._execute_traced, self.tracer_provider
        while self._phase == "running":
            if not pending:
                wake: asyncio.Future[None] = self._loop.create_future()
                idle.append((me, wake))
                pulling.discard(me)
                await wake  # set by _dispatch (which counts this slot as pulling again) or at stop
                continue
            tracer = tracing.tracer(provider)  # looked up again after each park
            while pending and self._phase == "running":
                if self._adaptive:
                    self._shrink_ahead(time.monotonic())
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
            self._wake_reservers()

    def _slot_ended(self, slot: asyncio.Task[None]) -> None:
        self._slots.discard(slot)
        self._pulling.discard(slot)
        if not slot.cancelled() and slot.exception() is not None:
            log.error("internal error in a handler slot", exc_info=slot.exception())
        self._running.pop(slot, None)  # ended inside a job, without reaching its settle
        self._wake_reservers()
        self._dispatch()

    def _wake_idle_slots(self) -> None:
        """Let every parked slot see that the worker stops (it ends)."""
        idle, self._idle = self._idle, []
        for _, wake in idle:
            if not wake.done():
                wake.set_result(None)

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
            runner = runners.pop() if runners else _new_runner()
            ctx = _copy_context()
            first = ctx.run(runner.send, coro)
            if first is _RETURNED:
                runners.append(runner)
                outcome = COMPLETED
            elif type(first) is _Raised:
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
                await rest
            finally:
                self._pulling.add(me)
            outcome = COMPLETED
        except BaseException as exc:  # KeyboardInterrupt/SystemExit raised by a handler: a failure too
            outcome, error = self._failure(exc, me)
        self._finish(job, outcome, error, span, started)

    async def _resumed(self, runner: Generator[Any, Any, None], first: Any, ctx: contextvars.Context) -> None:
        """Finish the handler that suspended in ``runner`` yielding ``first``; raise what it raised."""
        ended = await _resume(runner, first, ctx)
        self._runners.append(runner)  # it ended the handler: free for the next one
        if type(ended) is _Raised:
            raise ended.exc

    async def _blocking(self, fn: Callable[[Job], Any], job: Job) -> None:
        """Run the blocking handler ``fn`` in a thread (and await what it returns, if awaitable).
        A coroutine it returns runs in a context of its own (a copy of the slot's), as an async
        handler's steps do: a context variable it sets is not seen by the next job of the slot."""
        result = await self._threads.run(fn, job)
        if type(result) is CoroutineType:
            runners = self._runners
            runner = runners.pop() if runners else _new_runner()
            ctx = _copy_context()
            first = ctx.run(runner.send, result)
            if first is _RETURNED or type(first) is _Raised:
                runners.append(runner)
                if type(first) is _Raised:
                    raise first.exc
                return
            await self._resumed(runner, first, ctx)
        elif inspect.isawaitable(result):
            await result

    def _failure(self, exc: BaseException, me: asyncio.Task[None]) -> tuple[Outcome, BaseException | None]:
        """The outcome of a handler of slot ``me`` that raised ``exc``, and the error to record."""
        if isinstance(exc, asyncio.CancelledError):
            if self._abandoning:
                me.uncancel()
                return released("worker stopped before the handler finished (shutdown grace exceeded)"), None
            # The handler raised CancelledError of its own, or a cancellation the runtime did
            # not ask for landed in it: its handler's own (it cancelled its task), or one a job
            # before it on this slot left to land later. A failure like any other: the job is
            # settled, never left held by no one. A cancel count left on the slot ends it after
            # this job (``_slot``).
        return outcome_for_exception(exc), exc

    def _finish(self, job: Job, outcome: Outcome, error: BaseException | None, span: Process | None,
                started: float) -> None:
        """The handler is done: tell ``span``, and queue ``outcome`` for ``job`` (the report is
        made when its verdict comes back). Its slot goes to the next job while the outcome is
        settled in the background (queued before anything else runs; stop() waits for its
        verdict)."""
        if span is not None:
            span.outcome(outcome.kind, error, outcome.error_message)
        duration = _perf_counter() - started
        self._keeper.untrack(job)
        self.stats[outcome.kind] += 1
        self._settling += 1
        self._settler.notify(outcome, job._job.id, job.lease_id, (job, outcome, duration))

    def _settled_batch(self, args: list[tuple[Job, Outcome, float]], results: list[SettleResult] | None,
                       resent: int, error: BaseException | None) -> None:
        """The verdicts on a batch of ``notify`` items (``Settler``'s ``on_verdicts``): ``_settled``
        for each, in order — with no hooks, only for those that did not apply (nothing to do
        for the others but count them)."""
        self._settling -= len(args)
        if results is None:
            for arg in args:
                self._settled(arg, None, False, error)
        elif self._hooks:
            for i, (arg, result) in enumerate(zip(args, results, strict=True)):
                self._settled(arg, result, i < resent, None)
        else:
            for i, (arg, result) in enumerate(zip(args, results, strict=True)):
                if not result.ok:
                    self._settled(arg, result, i < resent, None)

    def _settled(self, arg: tuple[Job, Outcome, float], result: SettleResult | None, resent: bool,
                 error: BaseException | None) -> None:
        """The verdict on ``arg`` = (job, outcome, duration): log, report to the hooks."""
        if result is not None and result.ok and not self._hooks:
            return  # nothing to log, nobody to tell
        job, outcome, duration = arg
        refused = state = ""
        run_at: dt.datetime | None = None
        if result is None:
            refused = f"{type(error).__name__}: {error}"
            if isinstance(error, Abandoned):  # the stop gave it up and logs how many
                log.debug("settling job %s (%s) given up: %s", job.id, outcome.kind, error)
            else:
                log.error("settling job %s (%s) failed: %s", job.id, outcome.kind, error)
        elif result.ok:
            state = STATE_NAMES.get(result.state, "")
            if not state and outcome.kind == "completed":
                state = "completed"
            if result.HasField("run_at") and state == "scheduled":
                run_at = timestamp_to_datetime(result.run_at)
        else:
            refused = result.error_reason
            if outcome.kind == "retry_after" and refused == Reason.INVALID_ARGUMENT:
                # The delay is what the server does not take (past its max_schedule_horizon; the
                # ids came from its own Reserve): retry with the queue's backoff instead of
                # leaving the job held until its lease expires.
                log.warning("retry of job %s after %gs refused (%s); retrying it with the queue's backoff",
                            job.id, outcome.delay or 0.0, result.error_message)
                retry = replace(outcome, kind="retry", delay=None)
                self._settling += 1
                self._settler.notify(retry, job._job.id, job.lease_id, (job, retry, duration))
                return
            self.stats["refused"] += 1
            level = logging.INFO if resent else logging.WARNING
            note = " (re-sent after a transport error: the first may have applied it)" if resent else ""
            log.log(level, "settle of job %s (%s) refused: %s%s", job.id, outcome.kind, result.error_reason, note)
        if not self._hooks:
            return
        report = JobReport(job, outcome.kind, state, duration, outcome.error_message, run_at, refused)
        for hook in self._hooks:
            try:
                hook(report)
            except Exception:
                log.exception("on_outcome hook failed")

    def _settled_future(self, arg: tuple[Job, Outcome, float], fut: asyncio.Future[Settled]) -> None:
        """``_settled`` for an item settled through ``Settler.submit`` (a future)."""
        self._settling -= 1
        if fut.cancelled():
            self._settled(arg, None, False, asyncio.CancelledError())
        elif (exc := fut.exception()) is not None:
            self._settled(arg, None, False, exc)
        else:
            settled = fut.result()
            self._settled(arg, settled.result, settled.resent, None)

    def _release(self, jobs: Iterable[Job], why: str) -> None:
        """Queue a release of each of ``jobs``; the stop's last step waits for the verdicts
        (``_shutdown``), so a server that is gone holds up no step before it."""
        outcome = released(why)
        for job in jobs:
            self._keeper.untrack(job)
            self.stats[outcome.kind] += 1
            self._settling += 1
            fut = self._settler.submit(outcome, job.id, job.lease_id)
            fut.add_done_callback(partial(self._settled_future, (job, outcome, 0.0)))

    # ------------------------------------------------------------------ stopping

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
        reservers = [t for t in self._reservers if not t.done()]
        older_server = False
        if reservers and not self._hurry.is_set():
            loop = asyncio.get_running_loop()
            started = loop.time()
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
                            cancel_at = max(cancel_at, loop.time() + RESERVE_STOP_TIMEOUT)
                        asking = None
                    now = loop.time()
                    if now >= cancel_at:
                        break
                    if asking is None and now >= ask_at and self._reserve_calls:
                        asking = asyncio.create_task(self._rpc.stop_reserving(self.config.worker_id))
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
        if self._reserve_calls:
            if not self._hurry.is_set() and not older_server:
                self._unanswered = True
                log.warning("cancelling %d reserve call(s) still open: the server left StopReserving "
                            "unanswered for %.1fs (it gives back what it had leased for a call it sees "
                            "cancelled)", len(self._reserve_calls), RESERVE_STOP_TIMEOUT)
            self._reserve_cancelled = True
            for call in list(self._reserve_calls):
                call.cancel()  # a no-op for a call whose answer was already taken in
        for reserver in self._reservers:
            with contextlib.suppress(asyncio.CancelledError):
                await reserver

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
        if self._unanswered or not self._rpc.connected:
            log.debug("not telling the server this worker stopped: %s",
                      "it left calls unanswered" if self._unanswered else "no connection")
            return
        deadline = STOPPED_DEADLINE / 4 if self._hurry.is_set() else STOPPED_DEADLINE
        try:
            await self._rpc.stop_reserving(self.config.worker_id, deadline, stopped=True)
        except Exception as exc:  # the server gone: the worker goes quiet there instead
            log.debug("could not tell the server this worker stopped: %s", exc)

    async def _shutdown(self, grace: float) -> None:
        started = time.monotonic()
        try:
            # 1. stop reserving. A Reserve in flight may have been answered already (its reply on
            #    the wire): cancelling it would drop jobs the server leased to us, held by nobody
            #    until their lease expires. So the server is asked to end our
            #    long-polls (StopReserving) and every call is let end: what it brings is released
            #    at once. Calls are cancelled only on a hurry or once the server left
            #    StopReserving unanswered for RESERVE_STOP_TIMEOUT.
            self._room.set()
            self._wake_idle_slots()
            await self._await_reservers()
            # 2. release every prefetched job that never started.
            pending = list(self._pending)
            self._pending.clear()
            if pending:
                log.info("releasing %d prefetched job(s)", len(pending))
                self._release(pending, "worker stopping: job was prefetched, never started")
            # 3. let running handlers finish within the grace period.
            running = set(self._running)
            if running:
                log.info("waiting up to %.1fs for %d running job(s)", grace, len(running))
                hurry = asyncio.create_task(self._hurry.wait())
                remaining = max(0.0, grace - (time.monotonic() - started))
                await asyncio.wait({*running, hurry}, timeout=remaining, return_when=asyncio.FIRST_COMPLETED)
                while not self._hurry.is_set() and any(not t.done() for t in running):
                    remaining = grace - (time.monotonic() - started)
                    if remaining <= 0:
                        break
                    await asyncio.wait({*(t for t in running if not t.done()), hurry}, timeout=remaining,
                                       return_when=asyncio.FIRST_COMPLETED)
                hurry.cancel()
            # 4. abandon what is still running: release it.
            left = [t for t in self._running if not t.done()]
            if left:
                # A slot is in _running exactly while it runs a job, and runs nothing but
                # its handler across an await: each of these is inside its handler.
                stuck = [t for t in left if t in self._running]
                if self._hurry.is_set():  # a second signal (or stop(0)) cut the grace short
                    log.warning("releasing %d running job(s) now (the stop was hurried)", len(stuck))
                else:
                    log.warning("releasing %d job(s) still running after the grace period", len(stuck))
                self._abandoning = True
                for task in stuck:
                    task.cancel()
                await asyncio.wait(left, timeout=CANCEL_WAIT)
                # A handler that swallows cancellation never ends: give its job back anyway.
                hung = [self._running[t] for t in left if not t.done() and t in self._running]
                if hung:
                    log.warning("%d handler(s) ignored cancellation; releasing their job(s)", len(hung))
                    self._release(hung, "worker stopped; the handler did not end (shutdown grace exceeded)")
            # 5. wait for the acks and releases not answered yet: while the server answers, or
            #    SETTLE_STOP_TIMEOUT past its last answer; a hurry gives up what is being re-sent
            #    at once (Settler.flush). What is given up comes back after its lease.
            dropped = await self._settler.flush(SETTLE_STOP_TIMEOUT, self._hurry)
            if dropped:
                self._unanswered = True
                log.warning("gave up %d ack(s)/release(s) the server did not answer (%s): their jobs come "
                            "back after their lease", dropped,
                            "the stop was hurried" if self._hurry.is_set()
                            else f"no answer for {SETTLE_STOP_TIMEOUT:.0f}s")
            for _ in range(3):  # the last verdicts' reports run as callbacks, right after
                if not self._settling:
                    break
                await asyncio.sleep(0)
            # 6. say goodbye: the session is over (the Workers page lists the worker stopped,
            #    not live, until its next Reserve). Nothing depends on the answer.
            await self._say_stopped()
        finally:
            await self._keeper.close()
            await self._rpc.close()
            self._threads.shutdown()
            self._phase = "stopped"
            self._done.set()
            log.info("worker %s stopped", self.config.worker_id)


__all__ = ["JobReport", "OutcomeHook", "Worker"]
