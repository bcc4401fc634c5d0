"""Local validation against the cached ``ServerInfo`` (``CachedInfo``): the verdict on each
request of a batch, as the server's ``Validator`` would give it, and the batch written as
bytes when every request passes (``lean_batch``, through ``sepp.client._fastwire``).

``enqueue_batch`` of "plain" requests — queue, job type and payload only, the shape of a
bulk producer — is validated without a wire message per job (the client's per-job cost):
the verdict comes from a per-(queue, job type, encoding) memo of the validator's own
verdict plus the payload size (``plain_cap``). Anything else is validated whole, so the
verdicts stay exactly the validator's.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from sepp.api.v1 import common_pb2 as pb
from sepp.api.v1 import producer_pb2 as ppb
from sepp.client._fastwire import PLAIN_FEATURE, Shape, is_plain, lean_jobs, plain_runs
from sepp.domain.clock import SYSTEM_CLOCK, Clock, SystemClock
from sepp.errors import AtomicEnqueueError, ServerError
from sepp.limits import QueueLimits
from sepp.rejections import RejectionCode
from sepp.request import EnqueueRequest, IndexedRejection, Rejection, ServerInfo
from sepp.validation import Validator, server_fix

#: A local ``UnknownQueue`` re-fetches ServerInfo when the cache is older than this, seconds.
UNKNOWN_QUEUE_REFRESH_AFTER = 1.0


@dataclass(frozen=True, slots=True)
class CachedInfo:
    """A fetched ``ServerInfo``, the validator built from it and when it was fetched (by
    ``clock``: the client's, ``ClientOptions.clock``)."""

    info: ServerInfo
    validator: Validator
    fetched_at: float  # clock.monotonic() seconds
    #: ``plain_cap``'s memo: (queue, job_type, encoding) → payload cap in bytes, or -1.
    plain_caps: dict[tuple[str, str, str], int] = field(default_factory=dict, compare=False, repr=False)
    #: ``lean_batch``'s memo: (queue, job_type, encoding) → the ``Shape`` of such jobs.
    shapes: dict[tuple[str, str, str], Shape] = field(default_factory=dict, compare=False, repr=False)
    #: Whether the server reads plain jobs by column (feature ``enqueue_batch_plain``:
    #: ``EnqueueBatchRequest.plain``); ``lean_batch`` writes them so when it does.
    plain_wire: bool = False
    #: Where the time is read: the fetch, the cache's age, "now" for ``ScheduledTooFar``.
    clock: Clock = field(default=SYSTEM_CLOCK, compare=False, repr=False)

    @classmethod
    def build(cls, msg: ppb.ServerInfo, clock: Clock = SYSTEM_CLOCK) -> CachedInfo:
        """Convert a wire ``ServerInfo``, fetched now by ``clock``; raises ``ServerError`` if
        its limits are invalid."""
        try:
            info = ServerInfo.from_proto(msg)
        except ValidationError as exc:
            raise ServerError(f"the server advertised invalid limits: {exc}") from exc
        return cls(info, Validator(info.limits, info.queue_limits), clock.monotonic(),
                   plain_wire=PLAIN_FEATURE in info.features, clock=clock)

    def age(self) -> float:
        """Seconds since the fetch."""
        return self.clock.monotonic() - self.fetched_at

    def now_ns(self) -> int:
        """The wall clock now, UTC nanoseconds since the epoch (``time.time_ns`` with the
        system clock; ``clock.now()`` µs × 1000 otherwise)."""
        clock = self.clock
        return time.time_ns() if type(clock) is SystemClock else clock.now() * 1000

    def shape(self, queue: str, job_type: str, encoding: str) -> Shape | None:
        """The ``Shape`` of plain requests of (queue, job_type, encoding), memoized, or ``None``
        when such a request fails a check other than the payload size (``plain_cap`` -1)."""
        key = (queue, job_type, encoding)
        shape = self.shapes.get(key)
        if shape is None:
            cap = plain_cap(self, queue, job_type, encoding)
            if cap < 0:
                return None
            if len(self.shapes) >= _PLAIN_CAPS_MAX:
                self.shapes.clear()
            shape = self.shapes[key] = Shape(queue, job_type, encoding, cap)
        return shape

    def fresh(self, ttl: float | None) -> bool:
        """Whether the cache may still be used under ``ttl`` seconds (``None`` = forever)."""
        return ttl is None or self.age() < ttl


def batch_size_rejection(count: int, max_batch: int) -> Rejection | None:
    """The batch-level ``InvalidArgument`` for an empty or over-cap batch, else ``None``."""
    if 1 <= count <= max_batch:
        return None
    message = ("a batch needs at least one job" if count < 1
               else f"a batch holds at most {max_batch} jobs{server_fix('max_enqueue_batch')}")
    return Rejection(RejectionCode.INVALID_ARGUMENT, message, "jobs", max_batch, count)


def validate(cached: CachedInfo, proto: Any, at_ns: int | None = None) -> Rejection | None:
    """The local verdict on one wire request: its ``Rejection`` or ``None``."""
    verdict = cached.validator.validate(proto, cached.now_ns() if at_ns is None else at_ns)
    return None if verdict is None else Rejection.from_proto(verdict)


def needs_refresh(verdicts: Iterable[Rejection | None], cached: CachedInfo) -> bool:
    """Whether a local ``UnknownQueue`` should trigger one re-fetch of ``ServerInfo``."""
    return cached.age() >= UNKNOWN_QUEUE_REFRESH_AFTER and any(
        v is not None and v.code is RejectionCode.UNKNOWN_QUEUE for v in verdicts)


def validate_all(cached: CachedInfo, protos: Sequence[Any]) -> list[Rejection | None]:
    """Local verdicts of every job of a batch, in order (one clock reading)."""
    at = cached.now_ns()
    return [validate(cached, p, at) for p in protos]


def atomic_local_error(verdicts: Sequence[Rejection | None]) -> AtomicEnqueueError | None:
    """The error an atomic batch gets when any job fails locally (every failure, by index)."""
    errors = [IndexedRejection(i, v) for i, v in enumerate(verdicts) if v is not None]
    return AtomicEnqueueError(errors) if errors else None


def check_requests(requests: Iterable[EnqueueRequest]) -> list[EnqueueRequest]:
    """``requests`` as a list; raises ``TypeError`` for a non-``EnqueueRequest`` (as ``to_protos``)."""
    out: list[EnqueueRequest] = []
    append = out.append
    for req in requests:
        if not isinstance(req, EnqueueRequest):
            raise TypeError(f"expected EnqueueRequest, not {type(req).__name__}")
        append(req)
    return out


def plain_cap(cached: CachedInfo, queue: str, job_type: str, encoding: str) -> int:
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
        if cached.validator.validate(probe, cached.now_ns()) is None:
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
    whose verdict the memo (``plain_cap``) already knows."""
    at = cached.now_ns()
    out: list[Rejection | None] = []
    append = out.append
    caps = cached.plain_caps
    for req in requests:
        if is_plain(req):
            payload = req.payload
            if payload is None:
                cap = caps.get((req.queue, req.job_type, ""))
                if cap is None:
                    cap = plain_cap(cached, req.queue, req.job_type, "")
                if cap >= 0:
                    append(None)
                    continue
            else:
                cap = caps.get((req.queue, req.job_type, payload.encoding))
                if cap is None:
                    cap = plain_cap(cached, req.queue, req.job_type, payload.encoding)
                if len(payload.data) <= cap:
                    append(None)
                    continue
        append(validate(cached, req.to_proto(), at))
    return out


def lean_batch(cached: CachedInfo, requests: Sequence[EnqueueRequest]) -> bytes | None:
    """The serialized ``EnqueueBatchRequest`` of ``requests`` when every one is plain
    (``is_plain``) and passes local validation — so every local verdict is ``None`` and every
    job is sent; ``None`` otherwise (the caller takes the general path, which finds the
    rejections). To a server with ``plain_wire`` the jobs go by column
    (``_fastwire.plain_runs``), else the bytes are exactly
    ``batch_message(requests).SerializeToString()`` (``_fastwire.lean_jobs``)."""
    if cached.plain_wire:
        return plain_runs(requests, cached.shape)
    return lean_jobs(requests, cached.shape)
