"""``Worker``: reserve jobs, run their handlers, settle them; drain cleanly on SIGTERM.

::

    worker = Worker("127.0.0.1:7700", queues=["emails"], concurrency=8)

    @worker.handler("welcome")
    async def welcome(job: Job) -> dict[str, str]:
        message_id = await send_mail(job.json()["user_id"])
        return {"message_id": message_id}   # the job's result (None: no result)

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
its job is released too and its result ignored). A second signal skips the grace. The
history of a job released so says why: "worker stopped before the handler finished (shutdown
grace exceeded)", or "worker stopped by a second interrupt (SIGINT) before the handler
finished" (a second SIGTERM, ``stop(0)``: named the same way).
Last, wait for the acks and releases the server has not answered yet: as long as it
answers, or up to ``SETTLE_STOP_TIMEOUT`` past its last answer; a second signal gives up at
once what is being re-sent. What is given up (logged at WARNING with its count) comes back
after its lease. The very last call says the session is over (``StopReserving`` with
``stopped``, deadline ``STOPPED_DEADLINE``, only over a connection the channel holds and
unless the stop gave up on the server's answers; its failure is only logged at DEBUG), so
``sepp workers list`` and the Workers page show the worker as stopped at once instead of live
until it goes quiet.

The parts, one module each: the reserver (``_reserver``), the slot pool with the adaptive
prefetch (``_slots``, handler runners in ``_runners``), the outcomes and their reports
(``_reports``), the graceful stop (``_shutdown``); the lease keeper (``_lease``) and the
batched settling (``_settler``). This module holds the public ``Worker`` and its lifecycle.
Every time they read is the ``clock``'s (``sepp.domain.clock``; a handler's duration is
measured with ``time.perf_counter``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import threading
from collections.abc import Callable, Iterable
from dataclasses import replace
from time import monotonic as time_monotonic
from typing import Any, TypeVar

from sepp.client.auth import token_metadata
from sepp.client.tls import PathArg
from sepp.domain.clock import SYSTEM_CLOCK, Clock, SystemClock
from sepp.errors import TransportError
from sepp.worker._lease import LeaseKeeper
from sepp.worker._reports import JobReport, OutcomeHook, Reports
from sepp.worker._reserver import RESERVE_RETRY_MAX, Reserver
from sepp.worker._rpc import WorkerRpc
from sepp.worker._shutdown import (
    CANCEL_WAIT,
    RESERVE_STOP_EVERY,
    RESERVE_STOP_TIMEOUT,
    RESERVE_STOP_WAIT,
    SETTLE_STOP_TIMEOUT,
    STOPPED_DEADLINE,
    Stopper,
)
from sepp.worker._slots import SlotPool
from sepp.worker._threads import DaemonThreadPool
from sepp.worker.config import DEFAULT_TARGET, WorkerConfig, queue_tuple
from sepp.worker.registry import HandlerRegistry

log = logging.getLogger("sepp.worker")
H = TypeVar("H", bound=Callable[..., Any])


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
        clock: Where the worker reads the time (``sepp.domain.clock``): the lease lengths,
            the adaptive prefetch, the retry windows and the stop's waits. ``None`` = the
            system clock; tests pass a ``FakeClock``. The event loop's timers (the lease
            keeper's, ``asyncio.wait`` timeouts) still run on the loop's own clock.

    Raises ``ValueError`` for an invalid setting (a TLS file that cannot be read or used too).
    """

    def __init__(self, target: str = DEFAULT_TARGET, queues: str | Iterable[str] = (), *,
                 concurrency: int = 10, prefetch: int | None = None, lease_duration: float | None = None,
                 shutdown_grace: float = 30.0, worker_id: str = "", poll_wait: float = 5.0,
                 max_reserve: int = 256, settle_batch: int = 256, token: str | None = None,
                 tls_ca: PathArg | None = None, tls_cert: PathArg | None = None,
                 tls_key: PathArg | None = None, tracer_provider: Any = None, clock: Clock | None = None) -> None:
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
        self._clock: Clock = SYSTEM_CLOCK if clock is None else clock
        self._phase = "new"  # new → running → stopping → stopped (or new → stopped: stop() first)
        #: Whether ``run()`` was called (a stop before it leaves the first call a no-op).
        self._ran = False
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
        return self._pool.ahead

    @property
    def held(self) -> int:
        """Jobs held right now: running, prefetched, or done and being settled."""
        if not hasattr(self, "_pool"):  # not run (yet)
            return 0
        return len(self._pool.running) + len(self._pool.pending) + self._reports.settling

    # ------------------------------------------------------------------ lifecycle

    def _setup(self) -> None:
        """Build the worker's parts (on the running loop). Raises ``ValueError`` without queues."""
        cfg = self.config
        if not cfg.queues:
            raise ValueError("the worker has no queues to reserve from")
        clock = self._clock
        # The system clock's reading without a call of its own (once per job, adaptive prefetch).
        monotonic = time_monotonic if type(clock) is SystemClock else clock.monotonic
        self._rpc = WorkerRpc(cfg.target, credentials=cfg.credentials(), metadata=self._auth_metadata,
                              worker_id=cfg.worker_id, concurrency=cfg.concurrency)
        self._keeper = LeaseKeeper(self._rpc, cfg.lease_duration, clock=clock)
        self._reports = Reports(self._rpc, self._keeper, self._hooks, self.stats, cfg.settle_batch, clock)
        self._settler = self._reports.settler
        self._threads = DaemonThreadPool(cfg.concurrency, "sepp-handler")
        # Each queue's max_result_bytes as the Reserve answers say (the reserver writes it):
        # a handler's result is checked against its job's queue's before the ack.
        result_limits: dict[str, int] = {}
        self._pool = SlotPool(self.registry._handlers, self._threads, self._reports, concurrency=cfg.concurrency,
                              prefetch=cfg.prefetch, max_reserve=cfg.max_reserve,
                              tracer_provider=self.tracer_provider, monotonic=monotonic, result_limits=result_limits)
        self._reserver = Reserver(cfg, self._rpc, self._pool, self._keeper, self._reports, self._fatal_error,
                                  monotonic, result_limits)
        self._pool.on_room = self._reserver.wake
        self._hurry = asyncio.Event()
        self._done = asyncio.Event()
        self._stopper = Stopper(cfg.worker_id, self._rpc, self._reserver, self._pool, self._reports, self._keeper,
                                self._threads, self._hurry, clock)
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
        self._reserver.start()
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
            self._hurry_by("stop(0)")
        await asyncio.shield(self._begin_stop(self.config.shutdown_grace if grace is None else grace))

    def _begin_stop(self, grace: float) -> asyncio.Task[None]:
        """Start the graceful stop (once; later calls return the same task)."""
        if self._shutdown_task is None:
            self._phase = "stopping"
            self._reserver.active = self._pool.active = False
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
            self._hurry_by("a second interrupt (SIGINT)" if sig == signal.SIGINT else f"a second {sig.name}")

    def _hurry_by(self, cause: str) -> None:
        """Cut the stop's waits short; ``cause`` (the first hurry's) is named in the history
        of the running jobs it releases (``_shutdown.abandon_reason``)."""
        if not self._hurry.is_set():
            self._stopper.hurried_by = cause
            self._hurry.set()

    def _fatal_error(self, error: TransportError) -> None:
        """The server refused the worker's token: stop; ``run()`` raises ``error`` after the drain."""
        self._fatal = error
        self._begin_stop(self.config.shutdown_grace)

    async def _shutdown(self, grace: float) -> None:
        """The graceful stop (``Stopper.run``); then the worker is stopped, whatever failed."""
        try:
            await self._stopper.run(grace)
        finally:
            self._phase = "stopped"
            self._done.set()
            log.info("worker %s stopped", self.config.worker_id)


__all__ = ["CANCEL_WAIT", "RESERVE_RETRY_MAX", "RESERVE_STOP_EVERY", "RESERVE_STOP_TIMEOUT", "RESERVE_STOP_WAIT",
           "SETTLE_STOP_TIMEOUT", "STOPPED_DEADLINE", "JobReport", "OutcomeHook", "Worker"]
