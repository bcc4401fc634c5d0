"""Helpers for the worker-side integration tests: raw WorkerService calls (``Wire``) and
job state through the admin API. Waiting is ``support.waiting``, failures ``support.failures``.

Job state is read through the admin API (``GetJob``, ``ListJobs``): the worker API
cannot show a finished job (its dead-letter reason, say).
"""

from __future__ import annotations

import asyncio
import datetime as dt
import time
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from typing import Any

import grpc

from sepp import AsyncClient, EnqueueRequest, wire
from sepp.api.v1 import admin_pb2 as apb
from sepp.api.v1 import common_pb2 as pb
from sepp.api.v1 import producer_pb2 as ppb
from sepp.api.v1 import worker_pb2 as wpb
from sepp.domain.states import state_name
from sepp.testing import ServerProcess
from sepp.testing.process import free_port
from sepp.worker import JobReport, Worker
from support.stubs import StubSet


def _state(number: int) -> str:
    """``DEAD_LETTERED``, …: the domain name table in capitals (as the worker tests spell states)."""
    return state_name(number).upper()


def ts_of(when: dt.datetime) -> Any:
    """An aware datetime as a protobuf Timestamp."""
    from google.protobuf import timestamp_pb2

    t = timestamp_pb2.Timestamp()
    t.FromDatetime(when.astimezone(dt.UTC))
    return t


class Wire(StubSet):
    """Blocking raw stubs for one server: enqueue, reserve, ack, nack, extend, settle.

    ``queue`` is the queue ``enqueue``/``reserve``/``reserve_one`` use when given none
    (a test on a shared server passes one of its own).
    """

    def __init__(self, target: str, *, queue: str = "q", **kw: Any) -> None:
        super().__init__(target, **kw)
        self.queue = queue

    def enqueue(self, queue: str | None = None, job_type: str = "t", *, priority: int | None = None,
                max_attempts: int | None = None, scheduled_at: dt.datetime | None = None,
                data: bytes = b"", **extra: Any) -> str:
        """Enqueue one job; returns its id."""
        req = pb.EnqueueRequest(queue=self.queue if queue is None else queue, job_type=job_type,
                                payload=pb.Payload(data=data), **extra)
        if priority is not None:
            req.priority = priority
        if max_attempts is not None:
            req.max_attempts = max_attempts
        if scheduled_at is not None:
            req.scheduled_at.CopyFrom(ts_of(scheduled_at))
        return str(self.producer.Enqueue(req, timeout=10).job_id)

    def enqueue_many(self, reqs: Sequence[pb.EnqueueRequest]) -> list[str]:
        """One EnqueueBatch; returns the ids (fails on any rejection)."""
        resp = self.producer.EnqueueBatch(ppb.EnqueueBatchRequest(jobs=list(reqs)), timeout=10)
        out = []
        for r in resp.results:
            assert r.WhichOneof("outcome") == "ack", r
            out.append(r.ack.job_id)
        return out

    def reserve(self, queues: Sequence[str] | None = None, max_jobs: int = 1, *, lease: float | None = None,
                wait: float = 0.0, worker_id: str = "test") -> list[wpb.Reservation]:
        """One Reserve call."""
        names = (self.queue,) if queues is None else queues
        req = wpb.ReserveRequest(queues=list(names), max_jobs=max_jobs, worker_id=worker_id)
        if lease is not None:
            req.lease_duration.CopyFrom(wire.seconds_to_duration(lease))
        if wait:
            req.wait.CopyFrom(wire.seconds_to_duration(wait))
        return list(self.worker.Reserve(req, timeout=wait + 10).reservations)

    def reserve_one(self, queues: Sequence[str] | None = None, *, lease: float | None = None,
                    wait: float = 2.0) -> wpb.Reservation:
        """Reserve exactly one job (long-polling up to ``wait``); fails when none comes."""
        got = self.reserve(queues, 1, lease=lease, wait=wait)
        assert len(got) == 1, "expected a job, got none"
        return got[0]

    def ack(self, res: wpb.Reservation | tuple[str, str]) -> None:
        """Ack (raises grpc.RpcError when refused)."""
        job_id, lease_id = _ids(res)
        self.worker.Ack(wpb.AckRequest(job_id=job_id, lease_id=lease_id), timeout=10)

    def nack(self, res: wpb.Reservation | tuple[str, str], directive: str = "retry", *, delay: float = 0.0,
             reason: str = "", message: str = "", detail: str = "") -> wpb.NackResponse:
        """Nack with ``retry`` | ``retry_after`` (``delay``) | ``dead_letter`` (``reason``) | ``release``."""
        job_id, lease_id = _ids(res)
        req = wpb.NackRequest(job_id=job_id, lease_id=lease_id, error=wpb.JobError(message=message, detail=detail))
        if directive == "retry":
            req.retry.SetInParent()
        elif directive == "retry_after":
            req.retry_after.CopyFrom(wire.seconds_to_duration(delay))
        elif directive == "dead_letter":
            req.dead_letter = reason
        elif directive == "release":
            req.release.SetInParent()
        else:
            raise ValueError(directive)
        return self.worker.Nack(req, timeout=10)  # type: ignore[no-any-return]

    def extend(self, res: wpb.Reservation | tuple[str, str], by: float) -> wpb.ExtendLeaseResponse:
        """ExtendLease by ``by`` seconds."""
        job_id, lease_id = _ids(res)
        return self.worker.ExtendLease(  # type: ignore[no-any-return]
            wpb.ExtendLeaseRequest(job_id=job_id, lease_id=lease_id, extend_by=wire.seconds_to_duration(by)),
            timeout=10)

    def settle(self, items: Sequence[wpb.SettleItem]) -> list[wpb.SettleResult]:
        """One batched Settle."""
        return list(self.worker.Settle(wpb.SettleRequest(items=list(items)), timeout=10).results)

    # admin (SPEC §4)

    def pause(self, queue: str, paused: bool = True) -> None:
        """PauseQueue / ResumeQueue."""
        if paused:
            self.admin.PauseQueue(apb.PauseQueueRequest(name=queue), timeout=10)
        else:
            self.admin.ResumeQueue(apb.ResumeQueueRequest(name=queue), timeout=10)

    def cancel(self, job_id: str, reason: str = "") -> pb.Job:
        """CancelJob: SCHEDULED/READY → CANCELLED; RESERVED → cancel requested."""
        return self.admin.CancelJob(apb.CancelJobRequest(job_id=job_id, reason=reason),  # type: ignore[no-any-return]
                                    timeout=10)

    def get_job(self, job_id: str) -> pb.Job:
        """GetJob."""
        return self.admin.GetJob(apb.GetJobRequest(job_id=job_id), timeout=10)  # type: ignore[no-any-return]


def _ids(res: wpb.Reservation | tuple[str, str]) -> tuple[str, str]:
    if isinstance(res, tuple):
        return res
    return res.job.id, res.lease_id


@contextmanager
def wire_for(server: ServerProcess, queue: str = "q") -> Iterator[Wire]:
    """A ``Wire`` for ``server`` whose default queue is ``queue``, closed afterwards."""
    w = Wire(server.grpc_target, queue=queue)
    try:
        yield w
    finally:
        w.close()


@dataclass(frozen=True)
class Row:
    """A job as the admin API shows it, reduced to what the tests need."""

    state: str
    attempt: int
    max_attempts: int
    reason: str | None
    run_at: float  # seconds since the epoch
    lease_id: str | None
    history: list[dict[str, Any]]

    @classmethod
    def of(cls, job: pb.Job) -> Row:
        """From a ``Job`` message (GetJob, or a ListJobs summary without history)."""
        history = [{"attempt": a.attempt, "worker_id": a.worker_id, "outcome": a.outcome,
                    "error_message": a.error_message, "error_detail": a.error_detail,
                    "started_at": a.started_at.ToMicroseconds(), "ended_at": a.ended_at.ToMicroseconds()}
                   for a in job.attempts]
        return cls(_state(job.state), job.attempt, job.max_attempts, job.dead_letter_reason or None,
                   job.run_at.ToMicroseconds() / 1e6, job.lease_id or None, history)


_wires: dict[str, Wire] = {}


def _admin(server: ServerProcess) -> Wire:
    """A cached ``Wire`` for the server's current address."""
    w = _wires.get(server.grpc_target)
    if w is None:
        w = _wires[server.grpc_target] = Wire(server.grpc_target)
    return w


def job_row(server: ServerProcess, job_id: str) -> Row | None:
    """One job through the admin ``GetJob`` (None when it does not exist)."""
    try:
        return Row.of(_admin(server).get_job(job_id))
    except grpc.RpcError as exc:
        if exc.code() == grpc.StatusCode.NOT_FOUND:  # type: ignore[attr-defined]
            return None
        raise


def _list(server: ServerProcess, queue: str) -> list[pb.Job]:
    out: list[pb.Job] = []
    token = ""
    while True:
        page = _admin(server).admin.ListJobs(apb.ListJobsRequest(queue=queue, page_size=1000, page_token=token),
                                             timeout=10)
        out.extend(s.job for s in page.jobs)
        token = page.next_page_token
        if not token:
            return out


def queue_rows(server: ServerProcess, queue: str) -> dict[str, Row]:
    """Every job of ``queue`` by id through the admin ``ListJobs`` (rows without history)."""
    return {job.id: Row.of(job) for job in _list(server, queue)}


def count_states(server: ServerProcess, queue: str = "q") -> dict[str, int]:
    """Jobs of ``queue`` by state name (admin ``ListJobs``)."""
    counts: dict[str, int] = {}
    for job in _list(server, queue):
        name = _state(job.state)
        counts[name] = counts.get(name, 0) + 1
    return counts


def fast_queue(**settings: Any) -> dict[str, Any]:
    """Queue settings with a short, jitter-free backoff (override with ``settings``)."""
    return {"retry_base": 0.05, "retry_jitter": 0.0, **settings}


@asynccontextmanager
async def running(worker: Worker) -> AsyncIterator[Worker]:
    """Run ``worker`` in the background; stop it (grace 5 s) on exit."""
    task = asyncio.create_task(worker.run(install_signal_handlers=False))
    try:
        yield worker
    finally:
        await worker.stop(5.0)
        await asyncio.wait_for(task, 10)


async def until(predicate: Callable[[], Any], within: float = 10.0, what: str = "") -> Any:
    """Poll ``predicate`` on the loop until truthy (the async ``support.waiting.wait_for``);
    ``AssertionError`` naming ``what`` after ``within`` seconds."""
    deadline = time.monotonic() + within
    while not (value := predicate()):
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what or predicate}")
        await asyncio.sleep(0.01)
    return value


class Gate:
    """Handlers held at a gate: ``handler`` (register it for a job type) counts the jobs it
    started (``started``) and keeps each running until ``open()``."""

    def __init__(self) -> None:
        self.started = 0
        self._open = asyncio.Event()

    async def handler(self, job: Any) -> None:
        """The handler: count the job, wait for the gate."""
        self.started += 1
        await self._open.wait()

    def open(self) -> None:
        """Let every held handler (and every later one) finish."""
        self._open.set()


def pinned_server(server_factory: Callable[..., ServerProcess]) -> ServerProcess:
    """A server (``support.servers.server_factory``) on a fixed port, so it can come back on
    it after a kill or stop, with queue ``q`` on 60 s leases."""
    return server_factory(grpc_listen=f"127.0.0.1:{free_port()}", queues={"q": fast_queue(lease_duration=60.0)})


async def enqueue_one(target: str) -> str:
    """One job of type ``t`` on ``q`` through a new ``AsyncClient``; its id."""
    async with AsyncClient(target) as client:
        return (await client.enqueue(EnqueueRequest("q", "t"))).job_id


def make_worker(server: ServerProcess, queue: str = "q", **kw: Any) -> tuple[Worker, list[JobReport]]:
    """A worker on ``queue`` with short polls (``poll_wait`` 0.5 s unless given), plus the list
    its reports (``on_outcome``) go to."""
    kw.setdefault("poll_wait", 0.5)
    worker = Worker(server.grpc_target, [queue], **kw)
    reports: list[JobReport] = []
    worker.on_outcome(reports.append)
    return worker, reports
