"""The blocking ``Client.enqueue_many``'s threads and its answer to Ctrl-C: the sender
threads (``Senders``), the oldest batch collected (``collect``), and after a
``KeyboardInterrupt`` the wait for the batches in flight (``interrupted``).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future, wait
from queue import SimpleQueue
from typing import Any

from sepp.client._many import ManyRun, OnBatch, Progress, provably_unsent
from sepp.domain.clock import Clock
from sepp.errors import EnqueueInterrupted, TransportError
from sepp.request import BatchResult

#: Longest the calling thread blocks in one wait, seconds. The OS hands a Ctrl-C (SIGINT) to
#: any thread of the process that does not block it — one of gRPC's or a sender — and Python
#: raises the ``KeyboardInterrupt`` in the main thread only when that thread runs again: a wait
#: that never woke up would hold the Ctrl-C back until the batch it waits for was answered (up
#: to the call's timeout). Waking this often bounds that delay.
WAKE_EVERY = 0.05


def wait_done(futures: Sequence[Future[Any]], clock: Clock | None = None, deadline: float | None = None) -> bool:
    """Block until every one of ``futures`` is done (True), or — given ``clock`` and
    ``deadline`` (its ``monotonic`` seconds) — until the deadline passed (False), waking every
    ``WAKE_EVERY`` seconds so that a Ctrl-C is raised here at once (see ``WAKE_EVERY``).
    Raises ``KeyboardInterrupt`` when one comes."""
    while True:
        step = WAKE_EVERY
        if clock is not None and deadline is not None:
            left = deadline - clock.monotonic()
            if left <= 0:
                return all(f.done() for f in futures)
            step = min(step, left)
        if not wait(futures, timeout=step).not_done:
            return True


class Senders:
    """The threads that send the batches of one ``enqueue_many``, at most ``count``, started as
    batches come (one per batch until there are ``count``). Unlike a ``ThreadPoolExecutor``
    they take a ``Future`` the caller made, so the caller records the batch before handing it
    over — a ``KeyboardInterrupt`` inside ``submit`` can never leave a batch sent that the
    caller does not know — and a batch whose future was cancelled before a thread took it is
    never sent. Daemon threads: after ``stop()`` a call still in flight (an interrupted
    ``enqueue_many``) never holds up the interpreter's exit."""

    def __init__(self, count: int) -> None:
        self._work: SimpleQueue[tuple[Future[list[BatchResult]], Callable[[], list[BatchResult]]] | None] = \
            SimpleQueue()
        self._stopped = False
        self._count = count
        self._started = 0

    def submit(self, fut: Future[list[BatchResult]], send: Callable[[], list[BatchResult]]) -> None:
        """Send a batch (``send()``) on a free thread; its outcome goes to ``fut``."""
        self._work.put((fut, send))
        if self._started < self._count:
            self._started += 1
            threading.Thread(target=self._run, name=f"sepp-enqueue-many_{self._started}", daemon=True).start()

    def stop(self) -> None:
        """End the threads once their current batch is done; batches not started are cancelled."""
        self._stopped = True
        for _ in range(self._count):
            self._work.put(None)

    def _run(self) -> None:
        while (item := self._work.get()) is not None:
            fut, send = item
            if self._stopped:
                fut.cancel()
            if not fut.set_running_or_notify_cancel():
                continue
            try:
                result = send()
            except BaseException as exc:  # the caller gets it from the future
                fut.set_exception(exc)
            else:
                fut.set_result(result)


def unsent(fut: Future[list[BatchResult]]) -> bool:
    """Whether the batch ``fut`` sends provably never reached a server: cancelled before it
    started, or failed with an error that says so (``provably_unsent``)."""
    return fut.cancelled() or (fut.done() and provably_unsent(fut.exception()))


def collect(run: ManyRun, progress: Progress | None, on_batch: OnBatch | None, total: int | None) -> None:
    """Wait for the oldest batch in flight, add its results to ``run.out`` (it leaves
    ``run.batches`` only then) and call the callbacks."""
    handle = run.batches[0].handle
    wait_done((handle,))
    results = handle.result()
    run.out.extend(results)
    run.batches.popleft()
    run.report(on_batch, progress, total)


def interrupted(run: ManyRun, senders: Senders, report: Callable[[], None], clock: Clock, grace: float
                ) -> EnqueueInterrupted:
    """After a ``KeyboardInterrupt``: wait for the batches in flight and pass them to the
    callbacks (``await_verdicts``), stop the sending threads and return the
    ``EnqueueInterrupted`` that accounts for every request. A further ``KeyboardInterrupt``
    ends the wait and the callbacks but not the account (one that lands while it is built
    has it built again)."""
    try:
        await_verdicts(run, report, clock, grace)
    except KeyboardInterrupt:  # a further Ctrl-C: stop waiting, stop calling the callbacks
        pass
    while True:
        try:
            senders.stop()
            return run.interrupted(unsent)
        except KeyboardInterrupt:
            continue


def await_verdicts(run: ManyRun, report: Callable[[], None], clock: Clock, grace: float) -> None:
    """After a ``KeyboardInterrupt``: cancel the batches not started yet (never sent), then
    add the results of those in flight to ``run.out``, in order, as long as they are
    answered within ``grace`` seconds (``ClientOptions.interrupt_grace``, by ``clock``), and
    pass each batch to the callbacks (``report``: ``ManyRun.report``) — first the one answered just before the
    interruption, if they did not get it all. Stops at the first batch without a verdict;
    a further Ctrl-C (``KeyboardInterrupt``) propagates, ending the wait and the
    callbacks. A callback that raises anything else is not called again (the wait goes
    on): ``run.note`` says so."""
    deadline = clock.monotonic() + grace

    def tell() -> None:
        if run.note is None:
            try:
                report()
            except Exception as exc:  # the callbacks are done with; the account is not
                run.callbacks_failed(exc)

    for sent in run.batches:
        sent.handle.cancel()  # those not started yet are never sent
    tell()
    for sent in list(run.batches):
        if sent.stop <= len(run.out):  # added to ``out`` just before the interruption
            continue
        if sent.start != len(run.out):
            return
        try:
            wait_done((sent.handle,), clock, deadline)
            results = sent.handle.result(timeout=0)
        except TransportError as exc:  # the answered parts of a batch sent in parts
            run.out.extend(exc.answered or ())
            tell()
            return
        except Exception:  # no verdict in time (TimeoutError), cancelled, closed client, …
            return
        run.out.extend(results)
        tell()


__all__ = ["WAKE_EVERY", "Senders", "await_verdicts", "collect", "interrupted", "unsent", "wait_done"]
