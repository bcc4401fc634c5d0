"""Raw-stub helpers for the admin API tests (SPEC §4): stubs, job factories, refusal decoding.

The admin tests talk to a real ``sepp serve`` through the generated stubs, so they
check the wire contract (status codes, ErrorInfo reasons) as well as the behaviour.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import grpc
from google.protobuf import duration_pb2

from sepp.api.v1 import admin_pb2 as apb
from sepp.api.v1 import admin_pb2_grpc, producer_pb2_grpc, worker_pb2_grpc
from sepp.api.v1 import common_pb2 as pb
from sepp.api.v1 import worker_pb2 as wpb
from sepp.wire import status_from_metadata, unpack_details

#: Timeout of every call, seconds.
CALL_TIMEOUT = 20.0


@dataclass
class AdminStubs:
    """A channel with the admin, producer and worker stubs; ``metadata`` carries the token."""

    channel: grpc.Channel
    admin: admin_pb2_grpc.AdminServiceStub
    producer: producer_pb2_grpc.ProducerServiceStub
    worker: worker_pb2_grpc.WorkerServiceStub
    metadata: tuple[tuple[str, str], ...] = ()

    def call(self, method: str, request: Any) -> Any:
        """An admin RPC by name (raises ``grpc.RpcError``)."""
        return getattr(self.admin, method)(request, timeout=CALL_TIMEOUT, metadata=self.metadata)

    def enqueue(self, queue: str, job_type: str = "t", **fields: Any) -> str:
        """Enqueue one job; returns its id."""
        ack = self.producer.Enqueue(pb.EnqueueRequest(queue=queue, job_type=job_type, **fields),
                                    timeout=CALL_TIMEOUT)
        return str(ack.job_id)

    def reserve(self, queue: str, max_jobs: int = 1, wait: float = 0.0) -> list[wpb.Reservation]:
        """Reserve up to ``max_jobs`` jobs of ``queue``."""
        req = wpb.ReserveRequest(queues=[queue], max_jobs=max_jobs, worker_id="admin-test")
        if wait:
            req.wait.CopyFrom(duration_pb2.Duration(seconds=int(wait), nanos=int(wait % 1 * 1e9)))
        return list(self.worker.Reserve(req, timeout=CALL_TIMEOUT + wait).reservations)

    def reserve_job(self, queue: str, job_id: str) -> wpb.Reservation:
        """Reserve until ``job_id`` comes out (others are released back)."""
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            for r in self.reserve(queue, 256):
                if r.job.id == job_id:
                    return r
                self.worker.Nack(wpb.NackRequest(job_id=r.job.id, lease_id=r.lease_id,
                                                 release=wpb.ReleaseDirective()), timeout=CALL_TIMEOUT)
        raise AssertionError(f"job {job_id} was never reserved")

    def dead_letter(self, queue: str, job_type: str = "t", reason: str = "boom", error: str = "it broke",
                    **fields: Any) -> str:
        """Enqueue a job, reserve it and nack it with ``dead_letter``; returns its id."""
        job_id = self.enqueue(queue, job_type, **fields)
        r = self.reserve_job(queue, job_id)
        self.worker.Nack(wpb.NackRequest(job_id=job_id, lease_id=r.lease_id, dead_letter=reason,
                                         error=wpb.JobError(message=error, detail="trace\nback")),
                         timeout=CALL_TIMEOUT)
        return job_id


@contextmanager
def connect(target: str, token: str | None = None) -> Iterator[AdminStubs]:
    """Stubs on a fresh channel, closed afterwards."""
    channel = grpc.insecure_channel(target)
    try:
        meta = (("authorization", f"Bearer {token}"),) if token else ()
        yield AdminStubs(channel, admin_pb2_grpc.AdminServiceStub(channel),
                         producer_pb2_grpc.ProducerServiceStub(channel), worker_pb2_grpc.WorkerServiceStub(channel),
                         meta)
    finally:
        channel.close()


@dataclass(frozen=True)
class Refusal:
    """A failed call: status code, ErrorInfo reason and metadata."""

    code: grpc.StatusCode
    reason: str
    metadata: dict[str, str]
    message: str


def refusal(call: Callable[[], Any]) -> Refusal:
    """Run ``call``, expect a ``grpc.RpcError`` and decode its rich status."""
    try:
        call()
    except grpc.RpcError as exc:
        status = status_from_metadata(exc.trailing_metadata())  # type: ignore[attr-defined]
        info = unpack_details(status).get("error_info") if status is not None else None
        return Refusal(exc.code(), info.reason if info else "", dict(info.metadata) if info else {},  # type: ignore[attr-defined]
                       exc.details() or "")  # type: ignore[attr-defined]
    raise AssertionError("the call succeeded")


def list_all(stubs: AdminStubs, page_size: int = 50, **filters: Any) -> list[apb.JobSummary]:
    """Every job of a listing, page by page."""
    out: list[apb.JobSummary] = []
    token = ""
    while True:
        page = stubs.call("ListJobs", apb.ListJobsRequest(page_size=page_size, page_token=token, **filters))
        out.extend(page.jobs)
        token = page.next_page_token
        if not token:
            return out


def wait_for(predicate: Callable[[], bool], timeout: float = 5.0) -> None:
    """Poll ``predicate`` until true; AssertionError after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        time.sleep(0.02)
