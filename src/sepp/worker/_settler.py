"""Batched settling: acks and nacks of jobs that finish together share one ``Settle`` call.

Natural batching (no timer): the first item goes out at once; items that arrive while
a call is in flight wait and leave together in the next one (up to ``max_batch``).
So an idle worker settles each job immediately and a busy one in large batches. When a
full batch is waiting while a call is in flight, a second call takes it at once (at
most ``max_in_flight`` calls): a busy worker is not held to one round trip per batch.

A batch that fails with a transient transport error (the server restarting, say) is
sent again with backoff for up to ``retry_for`` seconds. Re-sending is safe: a
repeated ack by the completing lease succeeds again (SPEC §6); a nack that did land
the first time is refused (LEASE_EXPIRED / LEASE_MISMATCH) the second, which the
result reports with ``resent = True``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeAlias

from sepp.api.v1 import worker_pb2 as wpb
from sepp.errors import TransportError
from sepp.worker._rpc import WorkerRpc
from sepp.worker.outcome import Outcome

log = logging.getLogger("sepp.worker")

#: ``notify``'s callback: ``(arg, result, resent, error)``, ``result`` None when ``error`` is set.
Then = Callable[[Any, "wpb.SettleResult | None", bool, "BaseException | None"], None]


@dataclass(frozen=True, slots=True)
class Settled:
    """The server's verdict on one item; ``resent`` when it took more than one call."""

    result: wpb.SettleResult
    resent: bool


#: A queued item: (outcome, job id, lease id, the future of ``submit`` or None, the callback
#: of ``notify`` or None, its argument).
_Item: TypeAlias = tuple[Outcome, str, str, "asyncio.Future[Settled] | None", "Then | None", Any]


class Settler:
    """Queues settle items and sends them in batches over ``rpc`` (see the module docstring)."""

    def __init__(self, rpc: WorkerRpc, *, max_batch: int = 256, retry_for: float = 60.0,
                 max_in_flight: int = 2) -> None:
        self._rpc = rpc
        self._max_batch = max_batch
        self._retry_for = retry_for
        self._max_in_flight = max_in_flight
        self._loop: asyncio.AbstractEventLoop | None = None
        self._items: list[_Item] = []
        #: Every send task not yet finished (what ``flush`` waits for).
        self._tasks: set[asyncio.Task[None]] = set()
        #: The send tasks that will still look at ``_items`` before they end. A task leaves
        #: this set in the same step in which it sees ``_items`` empty (no await between),
        #: so an item queued after that always starts a task of its own (issue 15 item 1:
        #: a finished task used to count as a sender until its done-callback ran).
        self._active: set[asyncio.Task[None]] = set()
        #: Settle calls made and items sent (metrics, tests).
        self.calls = 0
        self.items = 0

    def submit(self, outcome: Outcome, job_id: str, lease_id: str) -> asyncio.Future[Settled]:
        """Queue the ack/nack ``outcome`` of the delivery (``job_id``, ``lease_id``); the future
        resolves to its ``Settled`` verdict, or raises the ``SeppError`` that made its batch
        fail for good (an item whose future was cancelled before its batch left is not
        sent). The wire items are written when the batch is sent."""
        loop = self._loop
        if loop is None:
            loop = self._loop = asyncio.get_running_loop()
        fut: asyncio.Future[Settled] = loop.create_future()
        self._queue((outcome, job_id, lease_id, fut, None, None))
        return fut

    def notify(self, outcome: Outcome, job_id: str, lease_id: str, then: Then, arg: Any) -> None:
        """Like :meth:`submit`, without a future: ``then(arg, result, resent, error)`` is
        called (inside the send task) with the item's ``SettleResult`` and whether it took more
        than one call, or with ``result=None`` and the error that made its batch fail for
        good. Saves a future and a loop callback per job; ``then`` must not raise (what it
        raises is logged)."""
        if self._loop is None:
            self._loop = asyncio.get_running_loop()
        items = self._items  # _queue, inline (once per job)
        items.append((outcome, job_id, lease_id, None, then, arg))
        active = len(self._active)
        if not active or (len(items) >= self._max_batch and active < self._max_in_flight):
            self._start()

    def _queue(self, item: _Item) -> None:
        items = self._items
        items.append(item)
        active = len(self._active)
        if not active or (len(items) >= self._max_batch and active < self._max_in_flight):
            self._start()

    def _start(self) -> None:
        assert self._loop is not None
        task = self._loop.create_task(self._drain(), name="sepp-settler")
        self._tasks.add(task)
        self._active.add(task)
        task.add_done_callback(self._ended)

    def _ended(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        self._active.discard(task)  # a task cancelled before it ever ran

    @property
    def pending(self) -> int:
        """Items queued, plus the calls in flight."""
        return len(self._items) + len(self._tasks)

    async def flush(self) -> None:
        """Wait until everything submitted so far has its verdict."""
        while self._tasks or self._items:
            if self._items and not self._active:  # cannot happen (see _active); never hang on it
                self._start()
            with contextlib.suppress(Exception):
                await asyncio.wait(set(self._tasks))

    async def _drain(self) -> None:
        me = asyncio.current_task()
        assert me is not None
        try:
            while self._items:
                batch, self._items = self._items[:self._max_batch], self._items[self._max_batch:]
                await self._send_batch(batch)
        finally:
            self._active.discard(me)

    async def _send_batch(self, batch: list[_Item]) -> None:
        batch = [item for item in batch if (fut := item[3]) is None or not fut.cancelled()]
        if not batch:
            return
        try:
            request = wpb.SettleRequest()
            add = request.items.add
            for outcome, job_id, lease_id, *_ in batch:
                if outcome.kind == "completed":  # Outcome.fill's ack, inline: most items are acks
                    ack = add().ack
                    ack.job_id = job_id
                    ack.lease_id = lease_id
                else:
                    outcome.fill(add(), job_id, lease_id)
            results, resent = await self._send(request)
        except Exception as exc:  # a SeppError, or a bug: either way every waiter hears of it
            for _, _, _, fut, then, arg in batch:
                if fut is None:
                    self._call(then, arg, None, False, exc)
                elif not fut.done():
                    fut.set_exception(exc)
            return
        for (_, _, _, fut, then, arg), result in zip(batch, results, strict=True):
            if fut is None:
                try:
                    then(arg, result, resent, None)  # type: ignore[misc]
                except Exception:
                    log.exception("a settle callback failed")
            elif not fut.done():
                fut.set_result(Settled(result, resent))

    @staticmethod
    def _call(then: Then | None, arg: Any, result: wpb.SettleResult | None, resent: bool,
              error: BaseException | None) -> None:
        assert then is not None
        try:
            then(arg, result, resent, error)
        except Exception:
            log.exception("a settle callback failed")

    async def _send(self, request: wpb.SettleRequest) -> tuple[list[wpb.SettleResult], bool]:
        deadline = time.monotonic() + self._retry_for
        delay = 0.05
        tries = 0
        while True:
            tries += 1
            self.calls += 1
            try:
                results = await self._rpc.settle(request)
                self.items += len(request.items)
                return results, tries > 1
            except TransportError as exc:
                if not exc.transient or time.monotonic() + delay > deadline:
                    raise
                log.warning("settling %d job(s) failed (%s); retrying in %.2fs", len(request.items), exc, delay)
                await self._rpc.pause(delay * random.uniform(0.8, 1.2))
                delay = min(delay * 2, 2.0)


__all__ = ["Settled", "Settler"]
