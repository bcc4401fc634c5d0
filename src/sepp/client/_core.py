"""Transport-free logic shared by :class:`Client` and :class:`AsyncClient`.

Builds the wire messages, merges local and server verdicts of a batch, turns
``grpc.RpcError`` into sepp's exceptions, waits for a connection within a call's deadline
and decides whether (and how long) to back off before a retry. The two clients only add
the channel, the sleeping and the locking. Beside it: local validation against the cached
``ServerInfo`` (``_info``), the hand-encoded batch and the hand-read answer
(``_fastwire``), ``enqueue_many``'s bookkeeping (``_many``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

import grpc

from sepp.api.v1 import common_pb2 as pb
from sepp.api.v1 import producer_pb2 as ppb
from sepp.client._fastwire import FreshAcks, is_plain

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
    given_target,
    mark_reached,
    no_server_cause,
    normalize_target,
    reached_a_server,
    rpc_details,
)
from sepp.client.tls import tls_hint
from sepp.domain.clock import SYSTEM_CLOCK, Clock
from sepp.errors import (
    Overloaded,
    SeppError,
    ServerError,
    TransportError,
    Unavailable,
)
from sepp.request import (
    BatchResult,
    EnqueueAck,
    EnqueueRequest,
    Rejection,
    fresh_acks,
)


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


# ----------------------------------------------------------------- requests


def to_protos(requests: Iterable[EnqueueRequest]) -> list[Any]:
    """Wire messages of ``requests``; raises ``TypeError`` for a non-``EnqueueRequest``."""
    out = []
    for req in requests:
        if not isinstance(req, EnqueueRequest):
            raise TypeError(f"expected EnqueueRequest, not {type(req).__name__}")
        out.append(req.to_proto())
    return out



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
        if req._proto is None and is_plain(req):
            job = add(queue=req.queue, job_type=req.job_type)
            payload = req.payload
            if payload is not None:
                wire_payload = job.payload
                wire_payload.data = payload.data
                wire_payload.encoding = payload.encoding
        else:
            jobs.append(req.to_proto())
    return batch


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


def deadline(options: ClientOptions, extra: float = 0.0) -> float | None:
    """The deadline of an attempt starting now (``options.timeout``, plus ``extra`` seconds
    for a call that waits on the server by design: a long-poll), in ``options.clock``'s
    monotonic seconds, or ``None``."""
    return None if options.timeout is None else options.clock.monotonic() + options.timeout + extra


def attempt_timeout(options: ClientOptions, extra: float = 0.0) -> float | None:
    """The gRPC timeout of one attempt: ``options.timeout`` plus ``extra`` seconds (a
    long-poll's wait), or ``None`` without a timeout."""
    return None if options.timeout is None else options.timeout + extra


def time_left(deadline: float | None, clock: Clock = SYSTEM_CLOCK) -> float | None:
    """Seconds until ``deadline`` (``clock``'s monotonic seconds; ≤ 0 once passed), or ``None``
    without a deadline."""
    return None if deadline is None else deadline - clock.monotonic()


def waits_for_connection(error: SeppError, options: ClientOptions) -> bool:
    """Whether a failed try should wait for the connection and be sent again, key or not:
    ``options.wait_for_ready`` and the try provably never reached a server application
    (``Unavailable.not_sent``). Such waits are not retries: they do not count against
    ``RetryPolicy.max_attempts``, only the attempt's deadline bounds them."""
    return options.wait_for_ready and isinstance(error, Unavailable) and error.not_sent


def connect_pause(deadline: float | None, longest: float, clock: Clock = SYSTEM_CLOCK) -> float | None:
    """How long to wait for a connection before the next try: ``longest``, or less when the
    deadline (``clock``'s monotonic seconds) is nearer; ``None`` when too little time is
    left for another try (``MIN_ATTEMPT_TIME``)."""
    left = time_left(deadline, clock)
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


def client_target(target: str | None, options: ClientOptions) -> str:
    """``target`` as a client dials it (``target.normalize_target``: a ``grpc://`` or
    ``http://`` prefix removed; ``grpcs://`` / ``https://`` only with TLS configured); None
    (no target given) takes ``$SEPP_SERVER``, else ``DEFAULT_TARGET`` (``given_target``).
    Raises ``ValueError`` for a target that is not ``HOST:PORT`` in such a form."""
    return normalize_target(given_target(target), tls=options.credentials is not None)


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


