"""Batched settling: acks and nacks of jobs that finish together share one ``Settle`` call.

Natural batching (no timer): the first item goes out at once; items that arrive while
a call is in flight wait and leave together in the next one (up to ``max_batch``).
So an idle worker settles each job immediately and a busy one in large batches. When a
full batch is waiting while a call is in flight, a second call takes it at once (at
most ``max_in_flight`` calls): a busy worker is not held to one round trip per batch.

A batch that fails with a transient transport error (the server restarting, say) is
sent again with backoff for up to ``retry_for`` seconds. Re-sending is safe: a
repeated ack by the completing lease succeeds again; a nack that did land
the first time is refused (LEASE_EXPIRED / LEASE_MISMATCH) the second, which the
result reports with ``resent = True``. Items queued while a batch is being re-sent join
it (up to ``max_batch``) at its next try, and the batch is then re-sent until
``retry_for`` after the last of them joined: they do not wait behind it for its whole
window and then start one of their own. The pause between tries ends early once the
channel connects again (``WorkerRpc.pause``). A batch the server refuses as larger than
its message cap (``MessageTooLarge``: refused unread, nothing applied) is sent again in
halves, down to single items, so only an item too large by itself fails (the halves'
results do not say ``resent`` for an item an earlier, transiently failed try may have
applied).

``flush`` waits for every verdict; given ``idle_timeout`` and ``hurry`` (a stopping
worker), it gives up — ``abandon`` — once no ``Settle`` was answered for ``idle_timeout``
seconds, or once ``hurry`` is set and a batch is being re-sent (sends on their first try
get ``HURRY_WAIT``). An abandoned item's waiter gets ``Abandoned``; its job comes back
after its lease (or stays settled, when the abandoned call had reached the server).
"""

from __future__ import annotations

import asyncio
import logging
import math
import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeAlias

from sepp.api.v1 import worker_pb2 as wpb
from sepp.domain.clock import SYSTEM_CLOCK, Clock
from sepp.errors import MessageTooLarge, SeppError, TransportError
from sepp.wire import varint
from sepp.worker._failures import FailureLog
from sepp.worker._rpc import WorkerRpc
from sepp.worker.outcome import Outcome

log = logging.getLogger("sepp.worker")

#: The callback of ``notify``'s items, once per batch: ``(args, results, resent, error)`` — the
#: ``arg`` of each item, in order; their results (``None`` when ``error`` is set: the batch
#: failed for good, or was given up); the first ``resent`` items took more than one call.
Verdicts = Callable[[list[Any], "list[wpb.SettleResult] | None", int, "BaseException | None"], None]

#: Seconds a hurried ``flush`` still waits for sends on their first try (a reachable server
#: answers them in milliseconds; one that is gone fails them at once, and they are re-sent:
#: then the flush gives up at once).
HURRY_WAIT = 1.0

#: Longest pause between two tries of a batch, seconds (it ends early once the channel
#: connects again).
RETRY_PAUSE_MAX = 2.0


#: ``SettleRequest`` wire bytes (``_request``): the tag of an ``items`` entry (field 1,
#: length-delimited), and an ack of a job id and a lease id of ``_UUID_TEXT`` bytes each —
#: ``items`` (length 78) → ``SettleItem.ack`` (field 1, length 76) → ``AckRequest.job_id``
#: (field 1, length 36), the job id, then ``lease_id`` (field 2, length 36), the lease id.
#: An ack with a result adds ``AckRequest.result`` (field 4, ``_RESULT_TAG``): a ``Payload``
#: of ``data`` (field 1, left out when empty) then ``encoding`` (field 2, left out when
#: empty), so the two lengths in front grow by that field's size.
_ITEMS_TAG = b"\x0a"
_UUID_TEXT = 36
_ACK_BODY = 2 * (2 + _UUID_TEXT)  # AckRequest: two (tag, length, 36 bytes) fields
_ACK_HEAD = bytes((0x0A, 2 + _ACK_BODY, 0x0A, _ACK_BODY, 0x0A, _UUID_TEXT))
_ACK_LEASE = bytes((0x12, _UUID_TEXT))
_ACK_JOB = bytes((0x0A, _UUID_TEXT))
_RESULT_TAG = b"\x22"
_DATA_TAG = b"\x0a"
#: ``_result_frame``'s answers by (label, result size): a worker's results come in a
#: handful of labels and sizes, and an ack's framing depends on nothing else.
_FRAMES: dict[tuple[str, int], tuple[bytes, bytes, bytes]] = {}
#: Frames kept in ``_FRAMES`` at most (about 100 bytes each).
_FRAMES_MAX = 4096


def _length(n: int) -> bytes:
    """``varint(n)``, with the one-byte case inline (most lengths here)."""
    return bytes((n,)) if n < 0x80 else varint(n)


def _result_frame(encoding: str, size: int) -> tuple[bytes, bytes, bytes]:
    """The framing of an ack with a result of ``size`` bytes labelled ``encoding``, as three
    parts: ``head`` + job id + ``_ACK_LEASE`` + lease id + ``middle`` + the result's bytes +
    ``tail`` is the ``items`` entry ``SettleItem(ack=AckRequest(job_id, lease_id,
    result=Payload(data, encoding)))`` serializes to, for ids of ``_UUID_TEXT`` UTF-8 bytes
    (``tests/unit/test_worker_settle_wire.py`` checks it against protobuf's bytes).
    ``Payload.data`` (field 1) and ``encoding`` (field 2) are left out when empty, as proto3
    leaves out a default; the ``result`` field itself is always there. Raises
    ``UnicodeEncodeError`` for a label holding a lone surrogate (``Result`` refuses one)."""
    frame = _FRAMES.get((encoding, size))
    if frame is not None:
        return frame
    raw = encoding.encode("utf-8")
    tail = b"\x12" + _length(len(raw)) + raw if raw else b""
    data_head = _DATA_TAG + _length(size) if size else b""
    payload = len(data_head) + size + len(tail)
    middle = _RESULT_TAG + _length(payload) + data_head
    ack = _ACK_BODY + len(middle) - len(data_head) + payload
    ack_head = _length(ack)
    head = _ITEMS_TAG + _length(1 + len(ack_head) + ack) + b"\x0a" + ack_head + _ACK_JOB
    frame = (head, middle, tail)
    if len(_FRAMES) < _FRAMES_MAX:
        _FRAMES[(encoding, size)] = frame
    return frame


class Abandoned(SeppError):
    """The worker stopped before this settle was answered: ``Settler.abandon`` gave it up.
    Its job comes back after its lease (or stays settled, if the call had reached the
    server before it was given up)."""

    def __init__(self, message: str | None = None) -> None:
        super().__init__(message or "given up at stop before the server answered; the job comes back "
                                    "after its lease")


@dataclass(frozen=True, slots=True)
class Settled:
    """The server's verdict on one item; ``resent`` when it took more than one call."""

    result: wpb.SettleResult
    resent: bool


#: A queued item: (outcome, job id, lease id, the future of ``submit`` or None, the argument
#: of ``notify``).
_Item: TypeAlias = tuple[Outcome, str, str, "asyncio.Future[Settled] | None", Any]


class Settler:
    """Queues settle items and sends them in batches over ``rpc`` (see the module docstring);
    ``on_verdicts`` is told the verdicts of the items queued with ``notify``; ``clock``'s
    monotonic seconds time the re-send windows and ``flush``'s waits."""

    def __init__(self, rpc: WorkerRpc, *, max_batch: int = 256, retry_for: float = 60.0,
                 max_in_flight: int = 2, on_verdicts: Verdicts | None = None, clock: Clock = SYSTEM_CLOCK) -> None:
        self._rpc = rpc
        self._monotonic = clock.monotonic
        self._on_verdicts = on_verdicts
        self._max_batch = max_batch
        self._retry_for = retry_for
        self._max_in_flight = max_in_flight
        #: Failed tries of ``Settle`` logged at WARNING once, then at most every 30 s.
        self._failures = FailureLog(log, "settle", clock=clock.monotonic)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._items: list[_Item] = []
        #: Every send task not yet finished (what ``flush`` waits for).
        self._tasks: set[asyncio.Task[None]] = set()
        #: The send tasks that will still look at ``_items`` before they end. A task leaves
        #: this set in the same step in which it sees ``_items`` empty (no await between),
        #: so an item queued after that always starts a task of its own
        #: (a finished task used to count as a sender until its done-callback ran).
        self._active: set[asyncio.Task[None]] = set()
        #: The batches being sent (each a list ``_send`` may extend), what ``abandon`` fails.
        self._sending: list[list[_Item]] = []
        #: Batches being re-sent after a failure (a hurried ``flush`` gives up at once then).
        self._retrying = 0
        #: Set whenever a call is answered, a batch starts being re-sent or a send task ends
        #: (``flush`` waits on it). Created lazily, on the loop.
        self._changed: asyncio.Event | None = None
        #: ``clock.monotonic()`` of the last answered ``Settle`` (0: none yet).
        self.answered_at = 0.0
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
        self._queue((outcome, job_id, lease_id, fut, None))
        return fut

    def notify(self, outcome: Outcome, job_id: str, lease_id: str, arg: Any) -> None:
        """Like :meth:`submit`, without a future: the constructor's ``on_verdicts`` is told
        ``arg`` with the item's ``SettleResult`` and whether it took more than one call, or
        with the error that made its batch fail for good — inside the send task, once for
        all the notified items of a batch (a future, a loop callback and a call per job
        saved). ``on_verdicts`` must not raise (what it raises is logged)."""
        if self._loop is None:
            self._loop = asyncio.get_running_loop()
        items = self._items  # _queue, inline (once per job)
        items.append((outcome, job_id, lease_id, None, arg))
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
        self._changes()

    def _changes(self) -> None:
        """Wake a waiting ``flush``."""
        if self._changed is not None:
            self._changed.set()

    @property
    def pending(self) -> int:
        """Items queued, plus the calls in flight."""
        return len(self._items) + len(self._tasks)

    async def flush(self, idle_timeout: float | None = None, hurry: asyncio.Event | None = None) -> int:
        """Wait until everything submitted so far has its verdict; returns how many items were
        given up (0: every one has the server's verdict, or its batch failed for good).

        With ``idle_timeout`` (seconds), give up (``abandon``) once no ``Settle`` was answered
        for that long (counted from this call; each answer restarts it). Once ``hurry`` is set,
        give up as soon as a batch is being re-sent (the server failed it: nothing is likely
        to get through now), or ``HURRY_WAIT`` seconds after the hurry at most.
        """
        if self._changed is None:
            self._changed = asyncio.Event()
        changed = self._changed
        since = self._monotonic()
        hurried_at: float | None = None
        change_w: asyncio.Future[Any] | None = None
        hurry_w: asyncio.Future[Any] | None = None
        try:
            while self._tasks or self._items:
                if self._items and not self._active:  # cannot happen (see _active); never hang on it
                    self._start()
                now = self._monotonic()
                wake = math.inf
                if hurry is not None and hurry.is_set():
                    if hurried_at is None:
                        hurried_at = now
                    if self._retrying or now >= hurried_at + HURRY_WAIT:
                        return self.abandon()
                    wake = hurried_at + HURRY_WAIT
                if idle_timeout is not None:
                    idle_until = max(since, self.answered_at) + idle_timeout
                    if now >= idle_until:
                        return self.abandon()
                    wake = min(wake, idle_until)
                changed.clear()
                if change_w is None or change_w.done():
                    change_w = asyncio.ensure_future(changed.wait())
                waiters = {change_w}
                if hurry is not None and not hurry.is_set():
                    if hurry_w is None:
                        hurry_w = asyncio.ensure_future(hurry.wait())
                    waiters.add(hurry_w)
                await asyncio.wait(waiters, timeout=None if wake == math.inf else wake - now,
                                   return_when=asyncio.FIRST_COMPLETED)
        finally:
            for waiter in (change_w, hurry_w):
                if waiter is not None:
                    waiter.cancel()
        return 0

    def abandon(self) -> int:
        """Give up every item without a verdict — queued, or in a batch being sent (its call is
        cancelled) — and return how many there were: each waiter gets ``Abandoned``."""
        error = Abandoned()
        items, self._items = self._items, []
        dropped = self._fail(items, error)
        for batch in self._sending:
            dropped += self._fail(batch, error)
            batch.clear()
        for task in list(self._tasks):
            task.cancel()
        return dropped

    def _fail(self, batch: list[_Item], exc: BaseException) -> int:
        """Tell every waiter of ``batch`` that it failed with ``exc``; how many were told."""
        told = 0
        notified = []
        for _, _, _, fut, arg in batch:
            if fut is None:
                notified.append(arg)
            elif not fut.done():
                fut.set_exception(exc)
                told += 1
        if notified:
            self._tell(notified, None, 0, exc)
        return told + len(notified)

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
        self._sending.append(batch)
        halves: tuple[list[_Item], list[_Item]] | None = None
        try:
            results, once_from = await self._send(batch)
        except asyncio.CancelledError:
            self._fail(batch, Abandoned())  # empty when abandon() cancelled it (it told them already)
            raise
        except MessageTooLarge as exc:
            # The server refused the call unread (larger than its max_message_bytes): nothing
            # applied. Its halves go on their own, down to single items: one item too large
            # fails alone, not the acks that happened to share its batch.
            if len(batch) < 2:
                self._fail(batch, exc)
                return
            halves = batch[:len(batch) // 2], batch[len(batch) // 2:]
        except Exception as exc:  # a SeppError, or a bug: either way every waiter hears of it
            self._fail(batch, exc)
            return
        finally:
            self._sending.remove(batch)
        if halves is not None:
            for half in halves:
                await self._send_batch(half)
            return
        notified = [arg for _, _, _, fut, arg in batch if fut is None]
        if len(notified) == len(batch):  # as a rule (futures are for releases at a stop): one call
            self._tell(notified, results, once_from, None)
            return
        for i, ((_, _, _, fut, arg), result) in enumerate(zip(batch, results, strict=True)):
            resent = i < once_from
            if fut is None:
                self._tell([arg], [result], int(resent), None)
            elif not fut.done():
                fut.set_result(Settled(result, resent))

    @staticmethod
    def _request(batch: list[_Item]) -> wpb.SettleRequest:
        """The ``SettleRequest`` of ``batch``'s items, in order.

        Written as wire bytes and parsed once: an ack of a job whose id and lease id are
        canonical UUID text (36 bytes each, as the server writes them; nearly every item) is a
        constant prefix, its job id, a constant separator and its lease id (``_ACK_HEAD``) —
        with its result after them when it has one (the ``Payload`` field: the result's bytes
        in its framing for its label and size, ``_result_frame``, made once) — a third of the cost of
        ``items.add().ack`` and the field writes. Any other item (an ack with children too) is serialized by protobuf
        (``Outcome.fill``) and framed as an ``items`` entry; a repeated field's entries
        concatenate (the protobuf encoding)."""
        parts: list[bytes] = []
        extend = parts.extend
        frames = _FRAMES
        for outcome, job_id, lease_id, _, _ in batch:
            if outcome.kind == "completed":
                job = job_id.encode()
                lease = lease_id.encode()
                if len(job) == _UUID_TEXT == len(lease) and outcome.children is None:
                    result = outcome.result
                    if result is None:
                        extend((_ACK_HEAD, job, _ACK_LEASE, lease))
                        continue
                    frame = frames.get((outcome.result_encoding, len(result)))
                    if frame is None:
                        frame = _result_frame(outcome.result_encoding, len(result))
                    head, middle, tail = frame
                    extend((head, job, _ACK_LEASE, lease, middle, result, tail))
                    continue
            item = wpb.SettleItem()
            outcome.fill(item, job_id, lease_id)
            body = item.SerializeToString()
            extend((_ITEMS_TAG, varint(len(body)), body))
        return wpb.SettleRequest.FromString(b"".join(parts))

    def _join(self, batch: list[_Item]) -> int:
        """Move queued items (up to ``max_batch`` in all) into ``batch``, which is being
        re-sent; returns how many joined."""
        room = self._max_batch - len(batch)
        if room <= 0 or not self._items:
            return 0
        joining, self._items = self._items[:room], self._items[room:]
        joining = [item for item in joining if (fut := item[3]) is None or not fut.cancelled()]
        batch.extend(joining)
        return len(joining)

    def _tell(self, args: list[Any], results: list[wpb.SettleResult] | None, resent: int,
              error: BaseException | None) -> None:
        """``on_verdicts(args, results, resent, error)``, logging what it raises."""
        assert self._on_verdicts is not None, "notify() needs the Settler's on_verdicts"
        try:
            self._on_verdicts(args, results, resent, error)
        except Exception:
            log.exception("a settle callback failed")

    async def _send(self, batch: list[_Item]) -> tuple[list[wpb.SettleResult], int]:
        """Send ``batch`` until answered, re-sending it on transient failures for up to
        ``retry_for`` seconds after its last item joined (items queued meanwhile join it:
        ``_join``). Returns the results, in ``batch`` order, and the index from which the items
        were sent only once (those before it were re-sent). Raises the ``SeppError`` of the
        last try."""
        deadline = self._monotonic() + self._retry_for
        delay = 0.05
        once_from = 0
        retrying = False
        try:
            while True:
                request = self._request(batch)
                self.calls += 1
                try:
                    results = await self._rpc.settle(request)
                except TransportError as exc:
                    if not exc.transient or self._monotonic() + delay > deadline:
                        raise
                    if not retrying:
                        retrying = True
                        self._retrying += 1
                        self._changes()
                    self._failures.failed(f"{len(batch)} job(s): {exc}", delay)
                    await self._rpc.pause(delay * random.uniform(0.8, 1.2))
                    delay = min(delay * 2, RETRY_PAUSE_MAX)
                    once_from = len(batch)
                    if self._join(batch):
                        deadline = max(deadline, self._monotonic() + self._retry_for)
                    continue
                self.items += len(batch)
                self._failures.worked()
                self.answered_at = self._monotonic()
                self._changes()
                return results, once_from
        finally:
            if retrying:
                self._retrying -= 1


__all__ = ["HURRY_WAIT", "Abandoned", "Settled", "Settler"]
