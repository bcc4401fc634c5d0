"""Raw-stub helpers for the producer integration tests (SPEC §2 "Wire form", §3 Reserve).

These tests talk to a real ``sepp serve`` through the generated stubs only — never
through ``sepp.client`` — so they check the wire contract itself: request builders,
rejection assertions and "reserve everything". Failed calls are decoded by
``support.failures``.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import grpc
from google.protobuf import duration_pb2, timestamp_pb2

from sepp.api.v1 import common_pb2 as pb
from sepp.api.v1 import producer_pb2 as ppb
from sepp.api.v1 import worker_pb2
from sepp.wire import custom_to_proto
from support.failures import Failure
from support.stubs import CALL_TIMEOUT, CHANNEL_OPTIONS, StubSet

MiB = 1024 * 1024


# ---------------------------------------------------------------- channels and stubs


class Stubs(StubSet):
    """Producer-test verbs over the stubs (a channel without a client-side size cap)."""

    def info(self) -> ppb.ServerInfo:
        """GetServerInfo."""
        info: ppb.ServerInfo = self.producer.GetServerInfo(ppb.GetServerInfoRequest(), timeout=CALL_TIMEOUT)
        return info

    def enqueue(self, req: pb.EnqueueRequest) -> pb.EnqueueAck:
        """Enqueue one job (raises ``grpc.RpcError`` on failure)."""
        ack: pb.EnqueueAck = self.producer.Enqueue(req, timeout=CALL_TIMEOUT)
        return ack

    def batch(self, reqs: Iterable[pb.EnqueueRequest]) -> list[ppb.EnqueueResult]:
        """EnqueueBatch; the per-job results in order."""
        return list(self.producer.EnqueueBatch(ppb.EnqueueBatchRequest(jobs=list(reqs)),
                                               timeout=CALL_TIMEOUT).results)

    def atomic(self, reqs: Iterable[pb.EnqueueRequest]) -> list[pb.EnqueueAck]:
        """EnqueueAtomic; the acks in order."""
        return list(self.producer.EnqueueAtomic(ppb.EnqueueBatchRequest(jobs=list(reqs)),
                                                timeout=CALL_TIMEOUT).acks)

    def reserve(self, queues: Iterable[str], max_jobs: int = 256, wait: float = 0.0,
                lease: float | None = None) -> list[worker_pb2.Reservation]:
        """One Reserve call (long-polls up to ``wait`` seconds)."""
        req = worker_pb2.ReserveRequest(queues=list(queues), max_jobs=max_jobs, worker_id="producer-tests")
        if wait:
            req.wait.CopyFrom(duration(wait))
        if lease is not None:
            req.lease_duration.CopyFrom(duration(lease))
        return list(self.worker.Reserve(req, timeout=CALL_TIMEOUT + wait).reservations)

    def reserve_all(self, queues: Iterable[str]) -> list[pb.Job]:
        """Reserve until a call comes back empty; every job handed out, in delivery order."""
        names = list(queues)
        jobs: list[pb.Job] = []
        while True:
            got = self.reserve(names, max_jobs=256)
            if not got:
                return jobs
            jobs.extend(r.job for r in got)


@contextmanager
def connect(target: str) -> Iterator[Stubs]:
    """Open an insecure channel (no size cap) to ``target`` and yield the stubs."""
    stubs = Stubs(target, options=CHANNEL_OPTIONS)
    try:
        yield stubs
    finally:
        stubs.close()


# ---------------------------------------------------------------- request builders


def timestamp(epoch_seconds: float) -> timestamp_pb2.Timestamp:
    """A ``Timestamp`` for a float number of seconds since the epoch (µs precision)."""
    micros = round(epoch_seconds * 1_000_000)
    ts = timestamp_pb2.Timestamp()
    ts.seconds, rem = divmod(micros, 1_000_000)
    ts.nanos = rem * 1000
    return ts


def to_seconds(ts: timestamp_pb2.Timestamp) -> float:
    """A ``Timestamp`` as float seconds since the epoch."""
    return ts.seconds + ts.nanos / 1e9


def duration(seconds: float) -> duration_pb2.Duration:
    """A ``Duration`` for a float number of seconds."""
    d = duration_pb2.Duration()
    d.FromNanoseconds(round(seconds * 1e9))
    return d


def job(queue: str = "q", job_type: str = "t", *, data: bytes | None = None, encoding: str | None = None,
        custom: Mapping[str, Any] | None = None, priority: int | None = None, max_attempts: int | None = None,
        scheduled_at: float | None = None, key: str = "",
        trace: Mapping[str, str] | None = None) -> pb.EnqueueRequest:
    """An ``EnqueueRequest``. ``custom`` values are Python primitives (a ``CustomValue`` is
    taken as is, so an unset one can be sent); ``scheduled_at`` is epoch seconds."""
    req = pb.EnqueueRequest(queue=queue, job_type=job_type, idempotency_key=key)
    if data is not None or encoding is not None:
        req.payload.CopyFrom(pb.Payload(data=data or b"", encoding=encoding or ""))
    for name, value in (custom or {}).items():
        req.custom[name].CopyFrom(value if isinstance(value, pb.CustomValue) else custom_to_proto(value))
    if priority is not None:
        req.priority = priority
    if max_attempts is not None:
        req.max_attempts = max_attempts
    if scheduled_at is not None:
        req.scheduled_at.CopyFrom(timestamp(scheduled_at))
    for name, value in (trace or {}).items():
        req.trace_context[name] = value
    return req


# ---------------------------------------------------------------- rejection assertions

#: Status of a rejected single Enqueue per reason (SPEC §2 "Wire form").
STATUS_OF = {"UNKNOWN_QUEUE": grpc.StatusCode.NOT_FOUND}


def assert_rejection(rej: pb.Rejection, reason: str, meta: Mapping[str, str]) -> None:
    """A ``Rejection`` message has ``reason`` and exactly the details in ``meta``
    (``field``/``limit``/``actual``; a key absent from ``meta`` must be absent)."""
    assert pb.RejectionCode.Name(rej.code) == reason, (pb.RejectionCode.Name(rej.code), rej)
    assert rej.message, "a rejection carries a human-readable message"
    got: dict[str, str] = {}
    if rej.field:
        got["field"] = rej.field
    if rej.HasField("limit"):
        got["limit"] = str(rej.limit)
    if rej.HasField("actual"):
        got["actual"] = str(rej.actual)
    assert got == dict(meta), (reason, got)


def assert_rejected(failure: Failure, reason: str, meta: Mapping[str, str]) -> None:
    """A failed single ``Enqueue`` is the catalogue rejection ``reason`` on the wire:
    the right gRPC status, an ErrorInfo in domain ``sepp`` whose metadata is exactly
    ``meta``, and a ``Rejection`` detail that agrees with it."""
    expected = STATUS_OF.get(reason, grpc.StatusCode.INVALID_ARGUMENT)
    assert failure.code == expected, (failure.code, failure.message)
    info = failure.error_info
    assert info is not None, f"no ErrorInfo in {failure}"
    assert info.reason == reason, (info.reason, failure.message)
    assert info.domain == "sepp"
    assert dict(info.metadata) == dict(meta), (reason, dict(info.metadata))
    assert failure.rejection is not None, "the Rejection detail is missing"
    assert_rejection(failure.rejection, reason, meta)
    assert "retry_info" not in failure.details, "a rejection is not transient"
