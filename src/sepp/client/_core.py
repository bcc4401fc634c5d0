"""Transport-free logic shared by :class:`Client` and :class:`AsyncClient`.

Builds the wire messages, validates locally against the cached ``ServerInfo``,
merges local and server verdicts of a batch, turns ``grpc.RpcError`` into sepp's
exceptions and decides whether (and how long) to back off before a retry. The two
clients only add the channel, the sleeping and the locking.
"""

from __future__ import annotations

import re
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from itertools import islice
from typing import Any

import grpc
from pydantic import ValidationError

from sepp.api.v1 import common_pb2 as pb
from sepp.api.v1 import producer_pb2 as ppb
from sepp.api.v1 import producer_pb2_grpc as ppb_grpc

# The status decoder and shared channel arguments live in ``_status`` (importable without
# pydantic, for the Worker); re-exported here, where the clients have always found them.
from sepp.client._status import (  # noqa: F401 - re-exported
    ADMIN_REFUSALS,
    AUTH_ERRORS,
    RECONNECT_BACKOFF_MS,
    USER_AGENT,
    error_from_rpc,
    error_from_status,
    never_sent,
    reconnect_options,
)
from sepp.client.options import ClientOptions
from sepp.client.target import (
    first_contact_error,
    mark_reached,
    no_server_cause,
    normalize_target,
    reached_a_server,
    rpc_details,
)
from sepp.client.tls import tls_hint
from sepp.errors import (
    AtomicEnqueueError,
    EnqueueInterrupted,
    MessageTooLarge,
    Overloaded,
    SeppError,
    ServerError,
    TransportError,
    Unavailable,
    many_account,
)
from sepp.limits import QueueLimits
from sepp.rejections import RejectionCode
from sepp.request import (
    _EMPTY,
    BatchResult,
    EnqueueAck,
    EnqueueRequest,
    IndexedRejection,
    Rejection,
    ServerInfo,
    fresh_acks,
)
from sepp.validation import Validator

#: A local ``UnknownQueue`` re-fetches ServerInfo when the cache is older than this, seconds.
UNKNOWN_QUEUE_REFRESH_AFTER = 1.0

DEFAULT_TARGET = "127.0.0.1:7700"


def channel_options(options: ClientOptions) -> list[tuple[str, Any]]:
    """gRPC channel arguments: message caps, the ``sepp-python/<version>`` user agent, a short
    reconnect backoff and a subchannel pool of the channel's own (``reconnect_options``);
    then ``options.channel_options``, which override these."""
    return [
        ("grpc.primary_user_agent", USER_AGENT),
        ("grpc.max_send_message_length", options.max_message_bytes),
        ("grpc.max_receive_message_length", options.max_message_bytes),
        *reconnect_options(),
        *options.channel_options,
    ]


def now_ns() -> int:
    """The local wall clock, UTC nanoseconds since the epoch (for ``ScheduledTooFar``)."""
    return time.time_ns()


# ----------------------------------------------------------------- server info cache


@dataclass(frozen=True, slots=True)
class CachedInfo:
    """A fetched ``ServerInfo``, the validator built from it and when it was fetched."""

    info: ServerInfo
    validator: Validator
    fetched_at: float  # time.monotonic() seconds
    #: ``_plain_cap``'s memo: (queue, job_type, encoding) → payload cap in bytes, or -1.
    plain_caps: dict[tuple[str, str, str], int] = field(default_factory=dict, compare=False, repr=False)
    #: ``lean_batch``'s memo: (queue, job_type, encoding) → the ``_Shape`` of such jobs.
    shapes: dict[tuple[str, str, str], _Shape] = field(default_factory=dict, compare=False, repr=False)
    #: Whether the server reads plain jobs by column (feature ``enqueue_batch_plain``:
    #: ``EnqueueBatchRequest.plain``); ``lean_batch`` writes them so when it does.
    plain_wire: bool = False

    @classmethod
    def build(cls, msg: ppb.ServerInfo) -> CachedInfo:
        """Convert a wire ``ServerInfo``; raises ``ServerError`` if its limits are invalid."""
        try:
            info = ServerInfo.from_proto(msg)
        except ValidationError as exc:
            raise ServerError(f"the server advertised invalid limits: {exc}") from exc
        return cls(info, Validator(info.limits, info.queue_limits), time.monotonic(),
                   plain_wire=PLAIN_FEATURE in info.features)

    def age(self) -> float:
        """Seconds since the fetch."""
        return time.monotonic() - self.fetched_at

    def fresh(self, ttl: float | None) -> bool:
        """Whether the cache may still be used under ``ttl`` seconds (``None`` = forever)."""
        return ttl is None or self.age() < ttl


# ----------------------------------------------------------------- requests


def to_protos(requests: Iterable[EnqueueRequest]) -> list[Any]:
    """Wire messages of ``requests``; raises ``TypeError`` for a non-``EnqueueRequest``."""
    out = []
    for req in requests:
        if not isinstance(req, EnqueueRequest):
            raise TypeError(f"expected EnqueueRequest, not {type(req).__name__}")
        out.append(req.to_proto())
    return out


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
    * ``exhausted``: the iterable was read to its end.
    """

    out: list[BatchResult] = field(default_factory=list)
    batches: deque[Sent] = field(default_factory=deque)
    exhausted: bool = False

    @property
    def handed(self) -> int:
        """How many requests were handed over to be sent (the end of the last batch)."""
        return max(len(self.out), self.batches[-1].stop) if self.batches else len(self.out)

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
        return EnqueueInterrupted(self.out, range(first, end), f"enqueue_many interrupted: {text}")

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
    return isinstance(error, UnsentTooLarge) or (isinstance(error, SeppError) and not_sent(error))


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
    if type(req) is EnqueueRequest and _plain(req):
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


def batch_size_rejection(count: int, max_batch: int) -> Rejection | None:
    """The batch-level ``InvalidArgument`` for an empty or over-cap batch, else ``None``."""
    if 1 <= count <= max_batch:
        return None
    message = "a batch needs at least one job" if count < 1 else f"a batch holds at most {max_batch} jobs"
    return Rejection(RejectionCode.INVALID_ARGUMENT, message, "jobs", max_batch, count)


def validate(cached: CachedInfo, proto: Any, at_ns: int | None = None) -> Rejection | None:
    """The local verdict on one wire request: its ``Rejection`` or ``None``."""
    verdict = cached.validator.validate(proto, now_ns() if at_ns is None else at_ns)
    return None if verdict is None else Rejection.from_proto(verdict)


def needs_refresh(verdicts: Iterable[Rejection | None], cached: CachedInfo) -> bool:
    """Whether a local ``UnknownQueue`` should trigger one re-fetch of ``ServerInfo``."""
    return cached.age() >= UNKNOWN_QUEUE_REFRESH_AFTER and any(
        v is not None and v.code is RejectionCode.UNKNOWN_QUEUE for v in verdicts)


def validate_all(cached: CachedInfo, protos: Sequence[Any]) -> list[Rejection | None]:
    """Local verdicts of every job of a batch, in order (one clock reading)."""
    at = now_ns()
    return [validate(cached, p, at) for p in protos]


def atomic_local_error(verdicts: Sequence[Rejection | None]) -> AtomicEnqueueError | None:
    """The error an atomic batch gets when any job fails locally (every failure, by index)."""
    errors = [IndexedRejection(i, v) for i, v in enumerate(verdicts) if v is not None]
    return AtomicEnqueueError(errors) if errors else None


#: Bytes of each result of a serialized ``EnqueueBatchResponse`` whose every result is an
#: ``EnqueueAck`` with a 36-character id and ``deduplicated`` false, in protobuf's encoding
#: (what sepp's server sends for such a batch: ``rpc.producer.acks_wire``).
_ACK_SIZE = 42
#: What precedes each id: results (1) of length 40, ack (1) of length 38, job_id (1) of length 36.
_ACK_HEAD = b"\n(\n&\n$"
#: The bytes of a canonical id; none of them occurs in ``_ACK_HEAD``.
_ID_BYTES = b"0123456789abcdef-"


class FreshAcks(list[str]):
    """The job ids of a batch answer in which every job got a fresh ack (no rejection, no
    deduplication), in order: what ``parse_batch_response`` gives for such an answer."""

    __slots__ = ()


def parse_batch_response(data: bytes) -> ppb.EnqueueBatchResponse | FreshAcks:
    """The deserializer of ``EnqueueBatch`` answers: ``FreshAcks`` when ``data`` is exactly the
    encoding of fresh acks with canonical ids (lower-case hex digits and dashes; read by a few
    C calls over the whole answer: a small part of parsing the message and reading each
    result), else the parsed message.
    Raises what ``EnqueueBatchResponse.FromString`` raises for bytes that do not parse."""
    count, rest = divmod(len(data), _ACK_SIZE)
    # Without the id bytes, exactly ``count`` heads are left: the bytes are heads and id bytes,
    # and the id bytes between two heads are an id (no head byte is an id byte). Split at the
    # heads, the first piece is empty and the other ``count`` hold 36 × count bytes in all: if
    # none is shorter than 36, each is an id of 36 (C calls only: a tenth of a regex's cost).
    # Fewer pieces: a head split by an id byte (not protobuf's layout; one piece holds head
    # bytes), however long the pieces.
    if count and not rest and data.translate(None, _ID_BYTES) == _ACK_HEAD * count:
        ids = data.decode("ascii").split(_ACK_TEXT_HEAD)
        if not ids[0] and len(ids) == count + 1:
            del ids[0]
            if min(map(len, ids)) == 36:
                return FreshAcks(ids)
    return ppb.EnqueueBatchResponse.FromString(data)


_ACK_TEXT_HEAD = _ACK_HEAD.decode("ascii")


def producer_stub(channel: Any) -> Any:
    """The ``ProducerService`` stub on ``channel`` (sync or aio), its ``EnqueueBatch`` answers
    read by ``parse_batch_response`` and its requests written by ``serialize_batch_request``
    (a message, or the bytes ``lean_batch`` wrote)."""
    stub = ppb_grpc.ProducerServiceStub(channel)
    stub.EnqueueBatch = channel.unary_unary("/sepp.api.v1.ProducerService/EnqueueBatch",
                                            request_serializer=serialize_batch_request,
                                            response_deserializer=parse_batch_response)
    return stub


def merge_batch(verdicts: Sequence[Rejection | None], response: ppb.EnqueueBatchResponse | FreshAcks | None
                ) -> list[BatchResult]:
    """Fill each slot: the local rejection, else the next server result (request order kept).

    ``response`` answers exactly the jobs whose verdict is ``None``, in order; it is
    ``None`` when nothing was sent. Raises ``ServerError`` on a count mismatch.
    """
    expected = verdicts.count(None)  # a C loop, not a generator step per job
    if isinstance(response, FreshAcks):
        if len(response) != expected:
            raise ServerError(f"the server returned {len(response)} results for {expected} jobs")
        if expected == len(verdicts):
            # A list[EnqueueAck] is the list[BatchResult] asked for (mypy: list is invariant).
            return fresh_acks(response)  # type: ignore[return-value]
        acks = iter(fresh_acks(response))
        return [v if v is not None else next(acks) for v in verdicts]
    results = list(response.results) if response is not None else []
    if len(results) != expected:
        raise ServerError(f"the server returned {len(results)} results for {expected} jobs")
    server = iter(results)
    out: list[BatchResult] = []
    for verdict in verdicts:
        if verdict is not None:
            out.append(verdict)
            continue
        result = next(server)
        kind = result.WhichOneof("outcome")
        if kind == "ack":
            out.append(EnqueueAck.from_proto(result.ack))
        elif kind == "rejection":
            out.append(Rejection.from_proto(result.rejection))
        else:
            raise ServerError("the server returned a batch result with neither ack nor rejection")
    return out


def atomic_acks(response: ppb.EnqueueAtomicResponse, sent: int) -> list[EnqueueAck]:
    """The acks of an atomic batch; raises ``ServerError`` on a count mismatch."""
    if len(response.acks) != sent:
        raise ServerError(f"the server returned {len(response.acks)} acks for {sent} jobs")
    return [EnqueueAck.from_proto(a) for a in response.acks]


def all_keyed(protos: Sequence[Any]) -> bool:
    """Whether every job carries an idempotency key (so re-sending cannot duplicate)."""
    return all(p.idempotency_key for p in protos)


# ----------------------------------------------------------------- errors


# ----------------------------------------------------------------- waiting for a connection

#: How long the blocking ``Client`` sleeps between tries while a call waits for a
#: connection (each try that finds no connection fails at once, before anything is sent),
#: seconds; ``AsyncClient`` waits for the channel's state to change instead, at most this
#: long per wait: ``CONNECT_WAIT_MAX``.
CONNECT_POLL = 0.05
CONNECT_WAIT_MAX = 1.0

#: A call waiting for a connection is not sent again with less than this left before its
#: deadline (seconds): it could only time out, and a timeout would wrongly say "maybe stored".
MIN_ATTEMPT_TIME = 0.01


def deadline(options: ClientOptions) -> float | None:
    """The monotonic deadline of an attempt starting now (``options.timeout``), or ``None``."""
    return None if options.timeout is None else time.monotonic() + options.timeout


def time_left(deadline: float | None) -> float | None:
    """Seconds until ``deadline`` (≤ 0 once passed), or ``None`` without a deadline."""
    return None if deadline is None else deadline - time.monotonic()


def waits_for_connection(error: SeppError, options: ClientOptions) -> bool:
    """Whether a failed try should wait for the connection and be sent again, key or not:
    ``options.wait_for_ready`` and the try provably never reached a server application
    (``Unavailable.not_sent``). Such waits are not retries: they do not count against
    ``RetryPolicy.max_attempts``, only the attempt's deadline bounds them."""
    return options.wait_for_ready and isinstance(error, Unavailable) and error.not_sent


def connect_pause(deadline: float | None, longest: float) -> float | None:
    """How long to wait for a connection before the next try: ``longest``, or less when the
    deadline is nearer; ``None`` when too little time is left for another try
    (``MIN_ATTEMPT_TIME``)."""
    left = time_left(deadline)
    if left is None:
        return longest
    if left < MIN_ATTEMPT_TIME:
        return None
    return min(longest, left)


def no_connection(options: ClientOptions, target: str, maybe_sent: bool,
                  last: grpc.RpcError | None = None) -> Unavailable:
    """The error of a call whose deadline passed while it waited for a connection:
    ``Unavailable``, ``not_sent`` unless an earlier attempt of the same call may have reached
    a server (``maybe_sent``). Not retried: the deadline is the caller's bound on waiting.
    ``last``: the last try's error; a TLS failure it shows is named (``tls.tls_hint``)."""
    where = f" ({target})" if target else ""
    details = rpc_details(last) if last is not None else ""
    tls = options.credentials is not None
    hint = tls_hint(details, tls)
    if not hint:  # what the last try ran into, in words ("connection refused: is sepp running on …?")
        cause = no_server_cause(details, target, tls=tls)
        hint = f"; last try: {cause}" if cause else ""
    sent = ("an earlier try may have reached the server" if maybe_sent
            else "the call was never sent: safe to send again")
    return Unavailable(f"server unavailable{where}: no connection within the {options.timeout:g} s deadline "
                       f"({sent}){hint}", code=grpc.StatusCode.UNAVAILABLE, not_sent=not maybe_sent)


def first_contact(error: SeppError, exc: grpc.RpcError, target: str, options: ClientOptions) -> Unavailable | None:
    """The ``Unavailable`` a call fails with at once because its address was never reached by
    this process and nothing there can be connected to (``target.first_contact_error``), else
    ``None`` — always ``None`` with ``options.wait_for_server_start``."""
    if options.wait_for_server_start:
        return None
    return first_contact_error(error, rpc_details(exc), target, tls=options.credentials is not None)


def after_failed_try(reached: bool, error: SeppError, exc: grpc.RpcError, target: str,
                     options: ClientOptions) -> bool:
    """Judge a failed try of a client that had (``reached``) or had not yet got an answer from
    a server at ``target``; returns whether it has now (a refusal is an answer:
    ``target.reached_a_server``, which this records for the process with ``mark_reached``).
    Raises the ``Unavailable`` of ``first_contact`` (from ``exc``) when the address was never
    reached and nothing there can be connected to: the call fails at once, naming the cause."""
    if reached:
        return True
    if reached_a_server(error):
        mark_reached(target)
        return True
    fast = first_contact(error, exc, target, options)
    if fast is not None:  # nothing there, and this process never reached it: say so now
        raise fast from exc
    return False


def client_target(target: str, options: ClientOptions) -> str:
    """``target`` as a client dials it (``target.normalize_target``: a ``grpc://`` or
    ``http://`` prefix removed; ``grpcs://`` / ``https://`` only with TLS configured).
    Raises ``ValueError`` for a target that is not ``HOST:PORT`` in such a form."""
    return normalize_target(target, tls=options.credentials is not None)


def not_sent(error: SeppError) -> bool:
    """Whether ``error`` says its try provably never reached a server application."""
    return isinstance(error, Unavailable) and error.not_sent


# ----------------------------------------------------------------- retry

def retry_delay(error: SeppError, attempt: int, options: ClientOptions, *, idempotent: bool,
                rand: Callable[[], float] | None = None) -> float | None:
    """Seconds to wait before trying again after ``attempt`` (1-based) failed, or ``None``.

    Retries ``Overloaded`` (nothing was stored), an ``Unavailable`` that provably was never
    sent (``not_sent``) and, when ``idempotent``, the other transient errors; never
    rejections, ``MessageTooLarge`` or ``ServerError``.
    """
    policy = options.retry
    if attempt >= policy.max_attempts or not isinstance(error, TransportError) or not error.transient:
        return None
    if isinstance(error, Overloaded):
        return policy.delay(attempt, error.retry_after, *(() if rand is None else (rand,)))
    if not idempotent and not (isinstance(error, Unavailable) and error.not_sent):
        return None
    return policy.delay(attempt, None, *(() if rand is None else (rand,)))


# ----------------------------------------------------------------- the batch fast path
#
# ``enqueue_batch`` of "plain" requests — queue, job type and payload only, the shape of a
# bulk producer — is validated without a wire message per job (the client's
# per-job cost): the verdict comes from a per-(queue, job type, encoding) memo of the
# validator's own verdict plus the payload size. Anything else is validated whole, so the
# verdicts stay exactly the validator's. The messages sent are still built by protobuf.

def _plain(req: EnqueueRequest) -> bool:
    """Whether ``req`` carries nothing but queue, job type and payload (and is no subclass,
    whose ``to_proto`` may differ)."""
    return (type(req) is EnqueueRequest and req.custom is _EMPTY and req.trace_context is _EMPTY
            and req.priority is None and req.max_attempts is None and req.scheduled_at is None
            and req.idempotency_key is None)


def check_requests(requests: Iterable[EnqueueRequest]) -> list[EnqueueRequest]:
    """``requests`` as a list; raises ``TypeError`` for a non-``EnqueueRequest`` (as ``to_protos``)."""
    out: list[EnqueueRequest] = []
    append = out.append
    for req in requests:
        if not isinstance(req, EnqueueRequest):
            raise TypeError(f"expected EnqueueRequest, not {type(req).__name__}")
        append(req)
    return out


def _plain_cap(cached: CachedInfo, queue: str, job_type: str, encoding: str) -> int:
    """The largest payload a plain request of (queue, job_type, encoding) passes with, or -1
    when such a request fails a check before or after the size (then it is validated whole).

    A probe with no data and that encoding passes exactly when every check but the payload
    size passes (a plain request meets nothing but checks 1–6; the probe's size 0 passes 5),
    and then the size is the only thing left: ``data`` ≤ the queue's ``max_payload_bytes``.
    """
    key = (queue, job_type, encoding)
    cap = cached.plain_caps.get(key)
    if cap is None:
        probe = pb.EnqueueRequest(queue=queue, job_type=job_type, payload=pb.Payload(encoding=encoding))
        cap = -1
        if cached.validator.validate(probe, now_ns()) is None:
            limits = cached.validator.queue_limits(queue)
            if isinstance(limits, QueueLimits):
                cap = limits.max_payload_bytes
        if len(cached.plain_caps) >= _PLAIN_CAPS_MAX:
            cached.plain_caps.clear()
        cached.plain_caps[key] = cap
    return cap


_PLAIN_CAPS_MAX = 4096


def validate_requests(cached: CachedInfo, requests: Sequence[EnqueueRequest]) -> list[Rejection | None]:
    """Local verdicts of every job of a batch, in order (one clock reading): the same as
    ``validate_all(cached, to_protos(requests))``, without wire messages for plain requests
    whose verdict the memo (``_plain_cap``) already knows."""
    at = now_ns()
    out: list[Rejection | None] = []
    append = out.append
    caps = cached.plain_caps
    for req in requests:
        if _plain(req):
            payload = req.payload
            if payload is None:
                cap = caps.get((req.queue, req.job_type, ""))
                if cap is None:
                    cap = _plain_cap(cached, req.queue, req.job_type, "")
                if cap >= 0:
                    append(None)
                    continue
            else:
                cap = caps.get((req.queue, req.job_type, payload.encoding))
                if cap is None:
                    cap = _plain_cap(cached, req.queue, req.job_type, payload.encoding)
                if len(payload.data) <= cap:
                    append(None)
                    continue
        append(validate(cached, req.to_proto(), at))
    return out


def with_trace(proto: pb.EnqueueRequest, carrier: dict[str, str] | None) -> pb.EnqueueRequest:
    """``proto`` with ``carrier`` (the W3C trace context tracing made for it) as its
    ``trace_context``: a copy, since a request's cached message is read-only; ``proto``
    itself when ``carrier`` is ``None`` (the caller gave a trace context: kept)."""
    if carrier is None:
        return proto
    msg = pb.EnqueueRequest()
    msg.CopyFrom(proto)
    msg.trace_context.update(carrier)
    return msg


def stamp_traces(batch: ppb.EnqueueBatchRequest, carriers: Sequence[dict[str, str] | None]
                 ) -> ppb.EnqueueBatchRequest:
    """Write each job's trace context from tracing (``carriers``, one per job, ``None`` =
    keep the job's own) into ``batch``; returns ``batch``. Only called when tracing records."""
    for job, carrier in zip(batch.jobs, carriers, strict=True):
        if carrier is not None:
            job.trace_context.update(carrier)
    return batch


def batch_message(requests: Sequence[EnqueueRequest]) -> ppb.EnqueueBatchRequest:
    """``EnqueueBatchRequest(jobs=[r.to_proto() for r in requests])``, built in place: a plain
    request (``_plain``) whose wire message was never built is written straight into the
    batch's repeated field (no message of its own to make and then copy: 0.55 instead of
    1.3 µs a job with the serialization), any other request's ``to_proto`` is copied in. The
    same message, field for field (presence of an empty payload included)."""
    batch = ppb.EnqueueBatchRequest()
    jobs = batch.jobs
    add = jobs.add
    for req in requests:
        if req._proto is None and _plain(req):
            job = add(queue=req.queue, job_type=req.job_type)
            payload = req.payload
            if payload is not None:
                wire_payload = job.payload
                wire_payload.data = payload.data
                wire_payload.encoding = payload.encoding
        else:
            jobs.append(req.to_proto())
    return batch


# ----------------------------------------------------------------- the batch as bytes
#
# The common batch — every job plain and passing its memoized verdict — is written straight
# as the serialized ``EnqueueBatchRequest``: one pass over the requests
# that validates (the ``_plain_cap`` memo) and encodes, instead of the verdict pass, the
# message built field by field and its serialization. protobuf's encoding of such a job:
#
#   jobs (1, length-delimited)  0x0a <len> queue: 0x0a <len> <utf-8>  job_type: 0x12 <len> <utf-8>
#                                          payload (3): 0x1a <len> [data: 0x0a <len> <bytes>]
#                                                                  [encoding: 0x12 <len> <utf-8>]
#
# (proto3: an empty string or bytes field is not written; a payload that is present is, even
# empty). The bytes are exactly ``batch_message(requests).SerializeToString()``
# (tests/unit/test_client_batch_path.py).


def _varint(n: int) -> bytes:
    """``n`` (≥ 0) as a protobuf base-128 varint."""
    out = bytearray()
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _field(tag: int, data: bytes) -> bytes:
    """A length-delimited field (``tag`` = field number << 3 | 2); ``b""`` for empty ``data``
    (proto3 writes no empty string or bytes field)."""
    return bytes((tag,)) + _varint(len(data)) + data if data else b""


class _Shape:
    """What the batch writer keeps per (queue, job type, encoding) of plain requests that pass
    every check but the size: the size cap, the job written without a payload, and per data
    length (≤ the cap) the bytes before the data (``head``); the encoding field follows it.
    ``run`` is the head of a ``PlainJobs`` run of such jobs (queue, job type, encoding)."""

    __slots__ = ("bare", "cap", "heads", "names", "run", "tail")

    def __init__(self, queue: str, job_type: str, encoding: str, cap: int) -> None:
        self.cap = cap
        self.names = _field(0x0A, queue.encode("utf-8")) + _field(0x12, job_type.encode("utf-8"))
        self.bare = b"\x0a" + _varint(len(self.names)) + self.names
        self.tail = _field(0x12, encoding.encode("utf-8"))
        self.run = self.names + _field(0x1A, encoding.encode("utf-8"))
        self.heads: dict[int, bytes] = {}

    def head(self, size: int) -> bytes:
        """The bytes of a job with ``size`` bytes of data that come before the data (memoized
        for up to ``_HEADS_MAX`` sizes)."""
        head = self.heads.get(size)
        if head is None:
            data_field = b"\x0a" + _varint(size) if size else b""
            payload_len = len(data_field) + size + len(self.tail)
            payload = b"\x1a" + _varint(payload_len)
            job_len = len(self.names) + len(payload) + payload_len
            head = b"\x0a" + _varint(job_len) + self.names + payload + data_field
            if len(self.heads) < _HEADS_MAX:
                self.heads[size] = head
        return head


#: Data lengths a ``_Shape`` memoizes the head of (the rest are built per job).
_HEADS_MAX = 4096


def _shape(cached: CachedInfo, queue: str, job_type: str, encoding: str) -> _Shape | None:
    """The ``_Shape`` of plain requests of (queue, job_type, encoding), or ``None`` when such a
    request fails a check other than the payload size (``_plain_cap`` -1)."""
    key = (queue, job_type, encoding)
    shape = cached.shapes.get(key)
    if shape is None:
        cap = _plain_cap(cached, queue, job_type, encoding)
        if cap < 0:
            return None
        if len(cached.shapes) >= _PLAIN_CAPS_MAX:
            cached.shapes.clear()
        shape = cached.shapes[key] = _Shape(queue, job_type, encoding, cap)
    return shape


#: The ``ServerInfo`` feature of a server that reads ``EnqueueBatchRequest.plain``.
PLAIN_FEATURE = "enqueue_batch_plain"

#: ``PlainJobs.data`` field heads (tag 4, wire type 2, then the length) for lengths below 1,024.
_DATA_HEADS = tuple(b"\x22" + _varint(n) for n in range(1024))


def lean_batch(cached: CachedInfo, requests: Sequence[EnqueueRequest]) -> bytes | None:
    """The serialized ``EnqueueBatchRequest`` of ``requests`` when every one is plain
    (``_plain``) and passes local validation — so every local verdict is ``None`` and every
    job is sent; ``None`` otherwise (the caller takes the general path, which finds the
    rejections). To a server with ``plain_wire`` the jobs go by column (``plain_batch``), else
    the bytes are exactly ``batch_message(requests).SerializeToString()``."""
    if cached.plain_wire:
        return plain_batch(cached, requests)
    parts: list[bytes] = []
    append = parts.append
    shape: _Shape | None = None
    queue = job_type = encoding = ""
    for req in requests:
        if not (type(req) is EnqueueRequest and req.custom is _EMPTY and req.trace_context is _EMPTY
                and req.priority is None and req.max_attempts is None and req.scheduled_at is None
                and req.idempotency_key is None):
            return None  # not plain: ``_plain``, inlined
        payload = req.payload
        enc = "" if payload is None else payload.encoding
        if shape is None or req.queue != queue or req.job_type != job_type or enc != encoding:
            queue, job_type, encoding = req.queue, req.job_type, enc
            shape = _shape(cached, queue, job_type, encoding)
            if shape is None:
                return None
        if payload is None:
            append(shape.bare)
            continue
        data = payload.data
        head = shape.heads.get(len(data))
        if head is None:
            if len(data) > shape.cap:
                return None
            head = shape.head(len(data))
        append(head)
        append(data)
        append(shape.tail)
    return b"".join(parts)


def plain_batch(cached: CachedInfo, requests: Sequence[EnqueueRequest]) -> bytes | None:
    """``lean_batch`` by column: the serialized ``EnqueueBatchRequest`` whose ``plain`` runs
    hold ``requests`` — one ``PlainJobs`` per stretch of consecutive requests with the same
    queue, job type and encoding — when every request is plain and passes local validation;
    ``None`` otherwise. The bytes are what ``SerializeToString`` of that message gives; the
    server stores each job as the ``EnqueueRequest`` it stands for."""
    out: list[bytes] = []
    parts: list[bytes] = []
    append = parts.append
    shape: _Shape | None = None
    queue = job_type = encoding = ""
    heads = _DATA_HEADS
    n_heads = len(heads)
    for req in requests:
        if not (type(req) is EnqueueRequest and req.custom is _EMPTY and req.trace_context is _EMPTY
                and req.priority is None and req.max_attempts is None and req.scheduled_at is None
                and req.idempotency_key is None):
            return None  # not plain: ``_plain``, inlined
        payload = req.payload
        if payload is None:
            enc, data = "", b""
        else:
            enc, data = payload.encoding, payload.data
        if shape is None or req.queue != queue or req.job_type != job_type or enc != encoding:
            if shape is not None:
                _close_run(out, shape, parts)
                parts = []
                append = parts.append
            queue, job_type, encoding = req.queue, req.job_type, enc
            shape = _shape(cached, queue, job_type, encoding)
            if shape is None:
                return None
        size = len(data)
        if size > shape.cap:
            return None
        append(heads[size] if size < n_heads else b"\x22" + _varint(size))
        append(data)
    if shape is None:
        return None
    _close_run(out, shape, parts)
    return b"".join(out)


def _close_run(out: list[bytes], shape: _Shape, parts: list[bytes]) -> None:
    """Append to ``out`` the ``plain`` field (number 2) of one run: ``shape.run`` and ``parts``
    (its data fields)."""
    out.append(b"\x12" + _varint(len(shape.run) + sum(map(len, parts))))
    out.append(shape.run)
    out.extend(parts)


def serialize_batch_request(request: ppb.EnqueueBatchRequest | bytes) -> bytes:
    """The ``EnqueueBatch`` request serializer: bytes (``lean_batch``) go as they are, a
    message is serialized."""
    return request if type(request) is bytes else request.SerializeToString()  # type: ignore[union-attr]
