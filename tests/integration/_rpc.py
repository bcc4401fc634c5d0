"""Raw-stub helpers for the producer integration tests (SPEC §2 "Wire form", §3 Reserve).

These tests talk to a real ``sepp serve`` through the generated stubs only — never
through ``sepp.client`` — so they check the wire contract itself: request builders,
a decoder for failed calls (gRPC status + the ``google.rpc.Status`` in the
``grpc-status-details-bin`` trailer), rejection assertions, "reserve everything"
and a poll-with-deadline helper.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, TypeVar

import grpc
from google.protobuf import duration_pb2, timestamp_pb2
from google.rpc import error_details_pb2, status_pb2

from sepp.api.v1 import common_pb2 as pb
from sepp.api.v1 import producer_pb2 as ppb
from sepp.api.v1 import producer_pb2_grpc, worker_pb2, worker_pb2_grpc
from sepp.testing import ServerProcess
from sepp.wire import custom_to_proto, status_from_metadata, unpack_details

T = TypeVar("T")

#: The ``server_factory`` fixture of tests/conftest.py: ServerConfig keys → a started server.
ServerFactory = Callable[..., ServerProcess]

#: gRPC channel options of the test channels: no client-side size cap, so a request over
#: the server's max_message_bytes really reaches the server and the server refuses it.
CHANNEL_OPTIONS = (("grpc.max_send_message_length", -1), ("grpc.max_receive_message_length", -1))

#: Timeout of every unary call the helpers make, seconds.
CALL_TIMEOUT = 20.0

MiB = 1024 * 1024


# ---------------------------------------------------------------- channels and stubs


@dataclass
class Stubs:
    """A channel with both stubs the producer tests use."""

    channel: grpc.Channel
    producer: producer_pb2_grpc.ProducerServiceStub
    worker: worker_pb2_grpc.WorkerServiceStub

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
    """Open an insecure channel to ``target`` and yield both stubs."""
    channel = grpc.insecure_channel(target, options=CHANNEL_OPTIONS)
    try:
        yield Stubs(channel, producer_pb2_grpc.ProducerServiceStub(channel),
                    worker_pb2_grpc.WorkerServiceStub(channel))
    finally:
        channel.close()


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


# ---------------------------------------------------------------- failed calls


@dataclass(frozen=True)
class Failure:
    """A failed RPC: its gRPC status plus whatever rich details the trailer carried."""

    code: grpc.StatusCode
    message: str
    status: status_pb2.Status | None
    details: dict[str, Any] = field(default_factory=dict)

    @property
    def error_info(self) -> error_details_pb2.ErrorInfo | None:
        """The ``google.rpc.ErrorInfo`` detail, if any."""
        return self.details.get("error_info")

    @property
    def retry_info(self) -> error_details_pb2.RetryInfo | None:
        """The ``google.rpc.RetryInfo`` detail, if any."""
        return self.details.get("retry_info")

    @property
    def rejection(self) -> pb.Rejection | None:
        """The ``sepp.api.v1.Rejection`` detail of a rejected ``Enqueue``, if any."""
        return self.details.get("rejection")

    @property
    def atomic(self) -> pb.AtomicRejections | None:
        """The ``AtomicRejections`` detail of a failed ``EnqueueAtomic``, if any."""
        return self.details.get("atomic")


def failure_of(err: grpc.RpcError) -> Failure:
    """Decode a ``grpc.RpcError`` raised by a unary call (sync or aio)."""
    trailers = err.trailing_metadata()  # type: ignore[attr-defined]
    status = status_from_metadata(trailers)
    details = unpack_details(status) if status is not None else {}
    code = err.code()  # type: ignore[attr-defined]
    if status is not None:
        assert status.code == code.value[0], "google.rpc.Status code differs from the gRPC status"
    return Failure(code, err.details() or "", status, details)  # type: ignore[attr-defined]


def fails(call: Callable[..., Any], *args: Any, **kwargs: Any) -> Failure:
    """Run ``call`` expecting a ``grpc.RpcError``; return it decoded."""
    try:
        result = call(*args, **kwargs)
    except grpc.RpcError as err:
        return failure_of(err)
    raise AssertionError(f"call succeeded but a failure was expected: {result!r}")


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


# ---------------------------------------------------------------- waiting


def wait_for(probe: Callable[[], T | None], timeout: float, interval: float = 0.02, what: str = "condition") -> T:
    """Call ``probe`` until it returns something other than ``None``/``False``; fail after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while True:
        value = probe()
        if value is not None and value is not False:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(interval)
