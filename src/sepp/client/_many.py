"""``enqueue_many``'s bookkeeping, shared by ``Client`` and ``AsyncClient``: the requests read in
batches (``chunked``), what was handed over to be sent and answered (``ManyRun``), and
what an interruption or a failure leaves stored; batches too large to send split by size.
"""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from itertools import islice
from typing import Any

import grpc

from sepp.client._fastwire import is_plain
from sepp.client.options import ClientOptions
from sepp.errors import EnqueueInterrupted, MessageTooLarge, TransportError, Unavailable, many_account
from sepp.request import BatchResult, EnqueueRequest

#: ``enqueue_many``'s progress callback: ``progress(done, total)`` after each batch is
#: answered, in request order — ``done`` jobs (acked or rejected) so far, ``total`` the
#: number of requests when the iterable has a ``len()``, else ``None``.
Progress = Callable[[int, "int | None"], None]


def chunked(requests: Iterable[EnqueueRequest], size: int) -> Iterator[list[EnqueueRequest]]:
    """``requests`` in lists of ``size`` (the last one shorter), read lazily."""
    it = iter(requests)
    while chunk := list(islice(it, size)):
        yield chunk


#: ``enqueue_many``'s batch callback: ``on_batch(start, results)`` after each batch is
#: answered, in request order — ``start`` the index of the batch's first request, ``results``
#: one ``EnqueueAck`` or ``Rejection`` per request of the batch, in order.
OnBatch = Callable[[int, list[BatchResult]], None]


@dataclass(slots=True)
class Sent:
    """One batch ``enqueue_many`` handed over to be sent: the requests ``start`` ≤ i < ``stop``
    and the ``Future`` (``Client``) or ``Task`` (``AsyncClient``) that sends it."""

    start: int
    stop: int
    handle: Any


@dataclass(slots=True)
class ManyRun:
    """The bookkeeping of one ``enqueue_many``, kept so that an interruption at any point
    (a ``KeyboardInterrupt`` can land between any two steps of the calling thread) leaves it
    telling what may have been stored:

    * ``out``: the results of the answered prefix, in order (extended in one step per batch);
    * ``batches``: the batches handed over whose results are not in ``out`` yet, in order — a
      batch enters *before* it is handed over to be sent (so none is sent unknown to it) and
      leaves only after its results were added to ``out``;
    * ``exhausted``: the iterable was read to its end;
    * ``seen`` / ``counted``: how many results of ``out`` were passed to ``on_batch`` and
      counted by ``progress`` (``report``).
    """

    out: list[BatchResult] = field(default_factory=list)
    batches: deque[Sent] = field(default_factory=deque)
    exhausted: bool = False
    seen: int = 0
    counted: int = 0
    #: Why the callbacks stopped before the account did (a callback raised after an
    #: interruption): a note for the ``EnqueueInterrupted``.
    note: str | None = None

    def report(self, on_batch: OnBatch | None, progress: Progress | None, total: int | None) -> None:
        """Pass the callbacks what they did not get of ``out`` yet: ``on_batch(seen,
        out[seen:])`` — one batch, since each batch added to ``out`` is reported before the
        next one is (or the answered parts of a batch sent in parts, when an interruption cut
        it short) — then ``progress(len(out), total)``. Each count moves on *before* its
        callback is called, so a callback interrupted part-way (a ``KeyboardInterrupt`` can
        land in it) is not called again for the same results. Whatever a callback raises
        propagates."""
        done = len(self.out)
        if self.seen < done:
            start, self.seen = self.seen, done
            if on_batch is not None:
                on_batch(start, self.out[start:done])
        if self.counted < done:
            self.counted = done
            if progress is not None:
                progress(done, total)

    @property
    def handed(self) -> int:
        """How many requests were handed over to be sent (the end of the last batch)."""
        return max(len(self.out), self.batches[-1].stop) if self.batches else len(self.out)

    def callbacks_failed(self, error: Exception) -> None:
        """Record in ``note`` that a callback raised ``error`` after an interruption (they are
        not called again: ``seen`` is where they stopped)."""
        self.note = (f"a callback raised {type(error).__name__}: {error}; on_batch and progress were not "
                     f"called for the requests from {self.seen} on")

    def maybe_end(self, first: int, unsent: Callable[[Any], bool]) -> int:
        """The end of the requests that may or may not be stored, from ``first`` (the answered
        prefix): the end of the last batch past ``first`` that may have reached the server —
        every one but those ``unsent(handle)`` proves never sent."""
        end = first
        for sent in self.batches:
            if sent.stop > first and not unsent(sent.handle):
                end = max(end, sent.stop)
        return end

    def interrupted(self, unsent: Callable[[Any], bool]) -> EnqueueInterrupted:
        """The ``EnqueueInterrupted`` that says what became of the requests now."""
        first = len(self.out)
        end = self.maybe_end(first, unsent)
        text = many_account(first, end, self.handed, rest=not self.exhausted)
        interrupted = EnqueueInterrupted(self.out, range(first, end), f"enqueue_many interrupted: {text}")
        if self.note is not None:
            interrupted.add_note(self.note)
        return interrupted

    def account(self, error: TransportError, unsent: Callable[[Any], bool]) -> None:
        """Complete ``error`` (raised by the first batch without a verdict, or before any batch
        was sent) with what became of the requests: ``answered`` (``out`` in front of what the
        failed batch's answered parts left there), ``maybe_stored``, and a message that says
        so, in place of the failed call's own word on whether it was sent (``call_message``)."""
        error.answered_after(self.out)
        first = len(error.answered or ())
        end = self.maybe_end(first, unsent)
        error.maybe_stored = range(first, end)
        error.call_message = _CALL_VERDICT.sub("", error.message)
        error.message = (f"{error.call_message}; enqueue_many: "
                         f"{many_account(first, end, self.handed, rest=not self.exhausted)}")
        error.args = (error.message,)

    def cancelled_note(self, unsent: Callable[[Any], bool]) -> str:
        """The note a cancelled ``AsyncClient.enqueue_many`` adds to its ``CancelledError``."""
        return "enqueue_many cancelled: " + self._note(unsent, "each passed to on_batch and progress")

    def stopped_note(self, unsent: Callable[[Any], bool]) -> str | None:
        """The note ``enqueue_many`` adds to any other exception that stops it (one a callback
        or the iterable raised, an item that is not a request) — raised as it is, so the note
        is the only word on the batches in flight, which may be stored. The answered requests
        are those passed to ``on_batch`` (the one whose callback raised included). None when
        no request was handed over to be sent (nothing to account for)."""
        if not self.handed:
            return None
        return "enqueue_many stopped: " + self._note(unsent, "each passed to on_batch")

    def _note(self, unsent: Callable[[Any], bool], where: str) -> str:
        first = len(self.out)
        return many_account(first, self.maybe_end(first, unsent), self.handed, rest=not self.exhausted, where=where)


#: What a failed call's message says of that one call's sending ("(the call was never sent: safe
#: to send again)", "(an earlier try may have reached the server)", "; nothing was sent"):
#: dropped from an ``enqueue_many`` error, whose account of every request replaces it.
_CALL_VERDICT = re.compile(r" ?\((?:the call was never sent|an earlier try may have reached)[^()]*\)"
                           r"|; nothing was sent")


def provably_unsent(error: BaseException | None) -> bool:
    """Whether a batch that failed with ``error`` provably never reached a server beyond the
    answered parts its error carries: a request too large to send, or ``Unavailable.not_sent``
    (a batch sent in parts stops at the failed part). Any other failure may have been stored."""
    return isinstance(error, UnsentTooLarge) or (isinstance(error, Unavailable) and error.not_sent)


class UnsentTooLarge(MessageTooLarge):
    """A batch larger than ``ClientOptions.max_message_bytes``, refused before it was sent
    (``check_size``): nothing of it reached a server, so ``enqueue_many`` sends it again in
    parts (``split_by_size``)."""


def check_size(size: int, options: ClientOptions, target: str) -> None:
    """Raise ``UnsentTooLarge`` when a request of ``size`` bytes exceeds the client's
    ``max_message_bytes`` (gRPC would refuse it the same, later and less clearly)."""
    if size > options.max_message_bytes:
        where = f" ({target})" if target else ""
        raise UnsentTooLarge(f"the request exceeds the gRPC message cap{where}: {size} bytes > max_message_bytes "
                             f"{options.max_message_bytes}; nothing was sent", code=grpc.StatusCode.RESOURCE_EXHAUSTED)


def wire_size(req: object) -> int:
    """An upper bound on the bytes ``req`` adds to a serialized ``EnqueueBatchRequest`` (its
    ``jobs`` entry: tag, length and message; a ``plain`` run's share is smaller): a plain
    request from its payload and names (4 bytes a character: UTF-8 at worst, no encoding
    done), any other from its wire message. 0 for what is not an ``EnqueueRequest``."""
    if type(req) is EnqueueRequest and is_plain(req):
        payload = req.payload
        data = 0 if payload is None else len(payload.data) + 4 * len(payload.encoding)
        return data + 4 * (len(req.queue) + len(req.job_type)) + 32
    if isinstance(req, EnqueueRequest):
        return req.to_proto().ByteSize() + 16
    return 0


#: Bytes ``split_by_size`` keeps free below the cap (slack for the message's own framing).
BATCH_HEADROOM = 1024


def split_by_size(requests: list[EnqueueRequest], max_bytes: int) -> list[list[EnqueueRequest]]:
    """``requests`` (≥ 2 of them) in consecutive parts whose ``wire_size`` sums stay within
    ``max_bytes - BATCH_HEADROOM`` (a request too large alone is a part of its own), order
    kept; at least two parts (halves when the sizes would fit in one)."""
    limit = max_bytes - BATCH_HEADROOM
    parts: list[list[EnqueueRequest]] = []
    part: list[EnqueueRequest] = []
    used = 0
    for req in requests:
        n = wire_size(req)
        if part and used + n > limit:
            parts.append(part)
            part, used = [], 0
        part.append(req)
        used += n
    parts.append(part)
    if len(parts) < 2:
        half = len(requests) // 2
        parts = [requests[:half], requests[half:]]
    return parts


def check_in_flight(in_flight: int) -> None:
    """Raise ``ValueError`` unless ``in_flight`` ≥ 1."""
    if isinstance(in_flight, bool) or not isinstance(in_flight, int) or in_flight < 1:
        raise ValueError(f"in_flight must be an int ≥ 1, not {in_flight!r}")
