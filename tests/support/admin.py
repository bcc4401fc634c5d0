"""Raw-stub helpers for the admin API tests (SPEC §4): stubs with the token, job factories, listings.

The admin tests talk to a real ``sepp serve`` through the generated stubs, so they
check the wire contract (status codes, ErrorInfo reasons: ``support.failures``) as well
as the behaviour.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from google.protobuf import duration_pb2

from sepp.api.v1 import admin_pb2 as apb
from sepp.api.v1 import common_pb2 as pb
from sepp.api.v1 import worker_pb2 as wpb
from support.stubs import CALL_TIMEOUT, StubSet


class AdminStubs(StubSet):
    """Admin-test verbs over the stubs; ``metadata`` carries the token."""

    def call(self, method: str, request: Any) -> Any:
        """An admin RPC by name (raises ``grpc.RpcError``)."""
        return getattr(self.admin, method)(request, timeout=CALL_TIMEOUT, metadata=self.metadata)

    def enqueue(self, queue: str, job_type: str = "t", **fields: Any) -> str:
        """Enqueue one job; returns its id."""
        ack = self.producer.Enqueue(pb.EnqueueRequest(queue=queue, job_type=job_type, **fields),
                                    timeout=CALL_TIMEOUT)
        return str(ack.job_id)

    def reserve(self, queue: str, max_jobs: int = 1, wait: float = 0.0,
                worker_id: str = "admin-test") -> list[wpb.Reservation]:
        """Reserve up to ``max_jobs`` jobs of ``queue``."""
        req = wpb.ReserveRequest(queues=[queue], max_jobs=max_jobs, worker_id=worker_id)
        if wait:
            req.wait.CopyFrom(duration_pb2.Duration(seconds=int(wait), nanos=int(wait % 1 * 1e9)))
        return list(self.worker.Reserve(req, timeout=CALL_TIMEOUT + wait).reservations)

    def reserve_job(self, queue: str, job_id: str, worker_id: str = "admin-test") -> wpb.Reservation:
        """Reserve until ``job_id`` comes out (others are released back)."""
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            for r in self.reserve(queue, 256, worker_id=worker_id):
                if r.job.id == job_id:
                    return r
                self.worker.Nack(wpb.NackRequest(job_id=r.job.id, lease_id=r.lease_id,
                                                 release=wpb.ReleaseDirective()), timeout=CALL_TIMEOUT)
        raise AssertionError(f"job {job_id} was never reserved")

    def dead_letter(self, queue: str, job_type: str = "t", reason: str = "boom", error: str = "it broke",
                    *, detail: str = "trace\nback", worker_id: str = "admin-test", **fields: Any) -> str:
        """Enqueue a job, reserve it (as ``worker_id``) and nack it with ``dead_letter``
        (error ``error`` / ``detail``); returns its id."""
        job_id = self.enqueue(queue, job_type, **fields)
        r = self.reserve_job(queue, job_id, worker_id)
        self.worker.Nack(wpb.NackRequest(job_id=job_id, lease_id=r.lease_id, dead_letter=reason,
                                         error=wpb.JobError(message=error, detail=detail)),
                         timeout=CALL_TIMEOUT)
        return job_id


@contextmanager
def connect(target: str, token: str | None = None) -> Iterator[AdminStubs]:
    """Stubs on a fresh channel, closed afterwards."""
    stubs = AdminStubs(target, token=token)
    try:
        yield stubs
    finally:
        stubs.close()


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
