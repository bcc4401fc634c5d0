"""Seeding and health: the fuzzed server's config (``SERVER_CONFIG``), ``seed`` (jobs in
every state on the declared ``SEED_QUEUES``), ``check_serving`` (the server still serves)
and ``peak_rss_kib``."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from typing import Any

import grpc
from google.protobuf import duration_pb2, field_mask_pb2
from grpc_health.v1 import health_pb2, health_pb2_grpc

from sepp.api.v1 import admin_pb2 as apb
from sepp.api.v1 import common_pb2 as pb
from sepp.api.v1 import producer_pb2 as ppb
from sepp.api.v1 import worker_pb2 as wpb
from sepp.limits import QueueSettings
from sepp.server.rpc.producer import queue_settings_proto
from support.fuzz.calls import Caller, Verdict, judge
from support.fuzz.pool import Pool
from support.fuzz.rpcs import CALL_TIMEOUT, Message, rpcs
from support.fuzz.strategies import TRACEPARENT

#: ServerConfig of a fuzzed server: fast sweeps (leases expire and poison rows are met within
#: the run) and a short long-poll cap (``max_reserve_wait`` 0.2 s), so a Reserve never waits
#: long and a wait above the cap is a quick INVALID_ARGUMENT.
SERVER_CONFIG: dict[str, Any] = {"sweep_interval": 0.05, "shutdown_grace": 5.0,
                                 "limits": {"max_reserve_wait": 0.2, "max_wait_seconds": 1.0}}

#: Queues :func:`seed` declares: defaults, one with a short dedup window and retention, one
#: where the first failed delivery dead-letters.
SEED_QUEUES = ("fuzz-a", "fuzz-b", "fuzz-dlq")


_seed_rounds = iter(range(10**9))


class _Refused(Exception):
    """A seeding call was refused (only raised inside :func:`seed`)."""


def seed(channel: grpc.Channel, pool: Pool, jobs_per_queue: int = 6, *,
         reset_settings: bool = True) -> list[tuple[Verdict, Message]]:
    """Set :data:`SEED_QUEUES` back to known settings and store jobs in every state there:
    READY and SCHEDULED (one an hour ahead), RESERVED (lease 60 s, and 1 s so it expires),
    COMPLETED, DEAD_LETTERED, CANCELLED; then delete a scratch queue. Every RPC is called at
    least once with a request it accepts; names, ids, keys and leases go to ``pool`` and
    the requests to its corpus (:meth:`Pool.keep`).

    With ``reset_settings`` every call must succeed (``grpc.RpcError`` otherwise). Without
    it a setting the fuzzer stored stays, so the rows seeded now meet it; a refused call
    skips the rest of its queue, and the refusals are returned judged (a stored setting
    that makes an Ack answer UNKNOWN shows here)."""
    c = Caller(channel)
    by = {r.label: r for r in rpcs()}
    refused: list[tuple[Verdict, Message]] = []

    def do(label: str, req: Message) -> Any:
        try:
            answer = c.method(by[label])(req, timeout=CALL_TIMEOUT)
        except grpc.RpcError as err:
            if reset_settings:
                raise
            refused.append((judge(by[label], req, err), req))
            raise _Refused from err
        pool.learn(answer)
        pool.keep(by[label], req)
        return answer

    try:
        _seed_rows(do, pool, jobs_per_queue, reset_settings)
    except _Refused:
        pass
    return refused


def _seed_rows(do: Callable[[str, Message], Any], pool: Pool, jobs_per_queue: int, reset_settings: bool) -> None:
    """The body of :func:`seed`; ``do`` makes one call."""
    round_ = next(_seed_rounds)
    overrides = {"fuzz-b": QueueSettings(dedup_window=60.0, completed_retention=120.0),
                 "fuzz-dlq": QueueSettings(default_max_attempts=1)}
    every_path = field_mask_pb2.FieldMask(paths=[f.name for f in pb.QueueSettings.DESCRIPTOR.fields])
    for name in SEED_QUEUES:  # every setting back to a known value (the fuzzer changes them)
        try:
            _seed_queue(do, pool, name, round_, jobs_per_queue, reset_settings,
                        queue_settings_proto(overrides.get(name, QueueSettings())), every_path)
        except _Refused:
            continue
    _seed_tail(do, round_)


def _seed_queue(do: Callable[[str, Message], Any], pool: Pool, name: str, round_: int, jobs_per_queue: int,
                reset_settings: bool, settings: pb.QueueSettings, every_path: field_mask_pb2.FieldMask) -> None:
    """One seeded queue (see :func:`seed`)."""
    if reset_settings:
        do("AdminService.DeclareQueue", apb.DeclareQueueRequest(name=name, settings=settings,
                                                                update_mask=every_path))
        do("AdminService.UpdateQueue", apb.UpdateQueueRequest(name=name, settings=settings, update_mask=every_path))
    else:
        do("AdminService.DeclareQueue", apb.DeclareQueueRequest(name=name))
    do("AdminService.PauseQueue", apb.PauseQueueRequest(name=name))
    do("AdminService.ResumeQueue", apb.ResumeQueueRequest(name=name))
    do("AdminService.GetQueue", apb.GetQueueRequest(name=name))
    pool.add("queue", name, sticky=True)
    jobs = []
    for i in range(jobs_per_queue):
        key = f"{name}-key-{round_}-{i}"
        job = pb.EnqueueRequest(queue=name, job_type=("email", "report")[i % 2], idempotency_key=key,
                                payload=pb.Payload(data=b'{"n": %d}' % i, encoding="application/json"))
        job.custom["n"].int_value = i
        job.trace_context["traceparent"] = TRACEPARENT
        if i == jobs_per_queue - 1:
            job.scheduled_at.FromSeconds(int(time.time()) + 3600)
        jobs.append(job)
        pool.add("key", key, sticky=True)
    do("ProducerService.EnqueueBatch", ppb.EnqueueBatchRequest(jobs=jobs[1:]))
    do("ProducerService.Enqueue", jobs[0])
    twice = [pb.EnqueueRequest(queue=name, job_type="t")] * 2
    do("ProducerService.EnqueueAtomic", ppb.EnqueueBatchRequest(jobs=twice))
    got = do("WorkerService.Reserve", wpb.ReserveRequest(queues=[name], max_jobs=3, lease_duration=_dur(60),
                                                         worker_id="fuzz-seed")).reservations
    if len(got) == 3:
        first, second, third = got
        do("WorkerService.Ack", wpb.AckRequest(job_id=first.job.id, lease_id=first.lease_id))
        do("WorkerService.Nack", wpb.NackRequest(job_id=second.job.id, lease_id=second.lease_id,
                                                 dead_letter="seeded", error=wpb.JobError(message="seeded")))
        do("WorkerService.ExtendLease", wpb.ExtendLeaseRequest(job_id=third.job.id, lease_id=third.lease_id,
                                                               extend_by=_dur(60)))
        again = wpb.SettleItem(ack=wpb.AckRequest(job_id=first.job.id, lease_id=first.lease_id))
        do("WorkerService.Settle", wpb.SettleRequest(items=[again]))
        do("AdminService.GetJob", apb.GetJobRequest(job_id=first.job.id))
    do("WorkerService.Reserve", wpb.ReserveRequest(queues=[name], max_jobs=1, lease_duration=_dur(1),
                                                   worker_id="fuzz-seed"))
    ready = do("AdminService.ListJobs", apb.ListJobsRequest(queue=name, state=pb.READY, page_size=2)).jobs
    for summary in ready:
        do("AdminService.CancelJob", apb.CancelJobRequest(job_id=summary.job.id, reason="seeded"))
    if ready:
        do("AdminService.RequeueJob", apb.RequeueJobRequest(job_id=ready[0].job.id))
    do("AdminService.FindJobByIdempotencyKey",
       apb.FindJobByIdempotencyKeyRequest(queue=name, key=jobs[0].idempotency_key))
    do("AdminService.GetQueueStats", apb.GetQueueStatsRequest(queues=[name]))


def _seed_tail(do: Callable[[str, Message], Any], round_: int) -> None:
    """The calls of :func:`seed` across queues, and a scratch queue deleted."""
    do("AdminService.ListJobs", apb.ListJobsRequest(page_size=2))  # a page token for the pool
    do("AdminService.RequeueDeadLettered", apb.RequeueDeadLetteredRequest(
        filter=apb.DeadLetterFilter(queue=SEED_QUEUES[0]), dry_run=True))
    scratch = f"fuzz-scratch-{round_}"
    ack = do("ProducerService.Enqueue", pb.EnqueueRequest(queue=scratch, job_type="t"))
    do("ProducerService.Enqueue", pb.EnqueueRequest(queue=scratch, job_type="t"))
    do("AdminService.DeleteJob", apb.DeleteJobRequest(job_id=ack.job_id))
    do("AdminService.PurgeQueue", apb.PurgeQueueRequest(queue=scratch))
    do("AdminService.DeleteQueue", apb.DeleteQueueRequest(name=scratch, force=True))
    do("AdminService.ListQueues", apb.ListQueuesRequest())  # last: a stored setting may break these two
    do("ProducerService.GetServerInfo", ppb.GetServerInfoRequest())


def _dur(seconds: int) -> duration_pb2.Duration:
    return duration_pb2.Duration(seconds=seconds)


_health_counter = iter(range(10**9))


def check_serving(target: str) -> None:
    """The server still serves: the health check says SERVING, a default ``Client.enqueue``
    (which reads ``GetServerInfo`` first) stores a job on a fresh queue, Reserve hands it
    out and Ack completes it, and ``ListQueues`` answers. Raises ``AssertionError`` (or the
    client's error) otherwise."""
    from sepp.client import Client
    from sepp.request import EnqueueRequest

    queue = f"health-{uuid.uuid4().hex[:8]}-{next(_health_counter)}"
    with grpc.insecure_channel(target) as channel:
        health = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=CALL_TIMEOUT)
        assert health.status == health_pb2.HealthCheckResponse.SERVING, health
        with Client(target) as client:
            ack = client.enqueue(EnqueueRequest(queue, "health"))
        c = Caller(channel)
        by = {r.label: r for r in rpcs()}
        got = c.method(by["WorkerService.Reserve"])(
            wpb.ReserveRequest(queues=[queue], max_jobs=1, lease_duration=_dur(30), worker_id="fuzz-health"),
            timeout=CALL_TIMEOUT).reservations
        assert [r.job.id for r in got] == [ack.job_id], f"reserve gave {[r.job.id for r in got]}, not {ack.job_id}"
        c.method(by["WorkerService.Ack"])(wpb.AckRequest(job_id=ack.job_id, lease_id=got[0].lease_id),
                                         timeout=CALL_TIMEOUT)
        c.method(by["AdminService.ListQueues"])(apb.ListQueuesRequest(), timeout=CALL_TIMEOUT)


def peak_rss_kib(pid: int) -> dict[int, int]:
    """VmHWM (peak resident set, KiB) of ``pid`` and its child processes (the writer), from /proc."""
    out: dict[int, int] = {}
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    out[pid] = int(line.split()[1])
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            children = [int(c) for c in f.read().split()]
    except OSError:
        return out
    for child in children:
        out.update(peak_rss_kib(child))
    return out
