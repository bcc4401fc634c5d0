"""What becomes of each job a worker held: its outcome queued for settling, the server's
verdict logged and reported to the ``on_outcome`` hooks (``JobReport``).

A handler's slot is free as soon as ``finish`` queued its outcome (the ``Settler`` sends
it in the background); the verdicts come back in batches (``Settler``'s ``on_verdicts``).
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from functools import partial
from typing import TYPE_CHECKING

from sepp.api.v1.worker_pb2 import SettleResult
from sepp.domain.states import STATE_NAMES
from sepp.rejections import Reason
from sepp.worker._lease import LeaseKeeper
from sepp.worker._rpc import WorkerRpc
from sepp.worker._settler import Abandoned, Settled, Settler
from sepp.worker.job import Job, timestamp_to_datetime
from sepp.worker.outcome import Outcome, OutcomeKind, released

if TYPE_CHECKING:
    from sepp._otel import Process
    from sepp.domain.clock import Clock

log = logging.getLogger("sepp.worker")
_perf_counter = time.perf_counter


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


class Reports:
    """Queues outcomes for settling and reports their verdicts.

    Args:
        rpc: The worker's calls (the ``Settler`` sends ``Settle`` over it).
        keeper: The lease keeper; a job leaves it when its outcome is queued.
        hooks: The ``on_outcome`` hooks (the worker's list: one added later is called too).
        stats: The worker's counters; each outcome kind and ``refused`` are counted here.
        settle_batch: Most items one ``Settle`` call carries.
        clock: The worker's clock (the ``Settler``'s retry windows).
    """

    def __init__(self, rpc: WorkerRpc, keeper: LeaseKeeper, hooks: list[OutcomeHook], stats: dict[str, int],
                 settle_batch: int, clock: Clock) -> None:
        self._keeper = keeper
        self._hooks = hooks
        self.stats = stats
        self.settler = Settler(rpc, max_batch=settle_batch, on_verdicts=self._settled_batch, clock=clock)
        #: Outcomes submitted whose verdict has not come back yet (their slot is already free).
        self.settling = 0

    def finish(self, job: Job, outcome: Outcome, error: BaseException | None, span: Process | None,
               started: float) -> None:
        """The handler is done: tell ``span`` (tracing's ``Process``, or ``None``) the
        outcome and ``error``, and queue ``outcome`` for ``job`` (the report is made when
        its verdict comes back; an ack carries the children the handler enqueued,
        ``Job.enqueue_children``: a failure drops them). ``started`` is the ``time.perf_counter()`` reading taken
        when the handler started (seconds). Its slot goes to the next job while the outcome
        is settled in the background (queued before anything else runs; a stop waits for
        its verdict)."""
        if span is not None:
            span.outcome(outcome.kind, error, outcome.error_message)
        duration = _perf_counter() - started
        if job._children is not None and outcome.kind == "completed":  # they travel with the ack
            outcome = replace(outcome, children=job._children)
        self._keeper.untrack(job)
        self.stats[outcome.kind] += 1
        self.settling += 1
        self.settler.notify(outcome, job._job.id, job.lease_id, (job, outcome, duration))

    def release(self, jobs: Iterable[Job], why: str) -> None:
        """Queue a release of each of ``jobs`` (``why``: the error message recorded); a
        stop's last step waits for the verdicts, so a server that is gone holds up no step
        before it."""
        outcome = released(why)
        for job in jobs:
            self._keeper.untrack(job)
            self.stats[outcome.kind] += 1
            self.settling += 1
            fut = self.settler.submit(outcome, job.id, job.lease_id)
            fut.add_done_callback(partial(self._settled_future, (job, outcome, 0.0)))

    def _settled_batch(self, args: list[tuple[Job, Outcome, float]], results: list[SettleResult] | None,
                       resent: int, error: BaseException | None) -> None:
        """The verdicts on a batch of ``notify`` items (``Settler``'s ``on_verdicts``): ``_settled``
        for each, in order — with no hooks, only for those that did not apply (nothing to do
        for the others but count them)."""
        self.settling -= len(args)
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
                self.settling += 1
                self.settler.notify(retry, job._job.id, job.lease_id, (job, retry, duration))
                return
            self.stats["refused"] += 1
            level = logging.INFO if resent else logging.WARNING
            note = " (re-sent after a transport error: the first may have applied it)" if resent else ""
            said = result.error_reason  # (a result refused: what became of the attempt too)
            if result.error_message and result.error_message != said:
                said = f"{said}: {result.error_message}"
            log.log(level, "settle of job %s (%s) refused: %s%s", job.id, outcome.kind, said, note)
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
        self.settling -= 1
        if fut.cancelled():
            self._settled(arg, None, False, asyncio.CancelledError())
        elif (exc := fut.exception()) is not None:
            self._settled(arg, None, False, exc)
        else:
            settled = fut.result()
            self._settled(arg, settled.result, settled.resent, None)


__all__ = ["JobReport", "OutcomeHook", "Reports"]
