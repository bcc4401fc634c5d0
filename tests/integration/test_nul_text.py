"""Free-form text PostgreSQL cannot hold (U+0000), through a real ``sepp serve`` on each
backend and raw gRPC stubs: a NUL in an enqueue's text fields or a Reserve's worker id is a
catalogued INVALID_ARGUMENT naming the field (never UNKNOWN/INTERNAL, never UNAVAILABLE) and
stores nothing; a NUL in a dead-letter reason is stored with U+FFFD instead, on every
backend (docs/decisions.md "PostgreSQL: several nodes on one database")."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from support.admin import AdminStubs, connect
from support.failures import fails
from support.servers import FAST, backend_config

from sepp.api.v1 import admin_pb2 as apb
from sepp.api.v1 import common_pb2 as pb
from sepp.api.v1 import producer_pb2 as ppb
from sepp.api.v1 import worker_pb2 as wpb
from sepp.testing import ServerProcess

NUL = "\x00"
T = 20.0  # seconds, every unary call's deadline


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory, backend: str) -> Iterator[ServerProcess]:
    """One server per backend for the input tests (each uses queues of its own)."""
    with ServerProcess(Path(tmp_path_factory.mktemp("pg-attacks")), {**FAST, **backend_config(backend)}) as proc:
        yield proc


@pytest.fixture
def stubs(srv: ServerProcess) -> Iterator[AdminStubs]:
    with connect(srv.grpc_target) as s:
        yield s


def _queue() -> str:
    return f"q-{uuid.uuid4().hex[:10]}"


# ------------------------------------------------------------- NUL, both backends


@pytest.mark.parametrize(("field", "fields"), [
    ("payload.encoding", {"payload": pb.Payload(data=b"x", encoding="json" + NUL)}),
    ("idempotency_key", {"idempotency_key": "key" + NUL + "x"}),
])
def test_enqueue_text_with_nul_is_invalid_argument_naming_the_field(stubs: AdminStubs, field: str,
                                                                     fields: dict[str, Any]) -> None:
    """A NUL in the encoding label or the idempotency key (stored as text: PostgreSQL
    cannot hold U+0000) is InvalidArgument with that field, on Enqueue, per item of
    EnqueueBatch (the other items stored) and for the whole EnqueueAtomic."""
    queue = _queue()
    failure = fails(stubs.producer.Enqueue, pb.EnqueueRequest(queue=queue, job_type="t", **fields), timeout=T)
    assert failure.code == grpc.StatusCode.INVALID_ARGUMENT
    assert failure.reason == "INVALID_ARGUMENT"
    assert failure.rejection is not None
    assert failure.rejection.code == pb.INVALID_ARGUMENT and failure.rejection.field == field
    assert "U+0000" in failure.rejection.message

    batch = stubs.producer.EnqueueBatch(ppb.EnqueueBatchRequest(jobs=[
        pb.EnqueueRequest(queue=queue, job_type="t", **fields), pb.EnqueueRequest(queue=queue, job_type="t")]),
        timeout=T)
    bad, good = batch.results
    assert bad.WhichOneof("outcome") == "rejection"
    assert (bad.rejection.code, bad.rejection.field) == (pb.INVALID_ARGUMENT, field)
    assert good.WhichOneof("outcome") == "ack"
    assert stubs.call("GetJob", apb.GetJobRequest(job_id=good.ack.job_id)).state == pb.READY

    atomic = fails(stubs.producer.EnqueueAtomic, ppb.EnqueueBatchRequest(jobs=[
        pb.EnqueueRequest(queue=queue, job_type="t"), pb.EnqueueRequest(queue=queue, job_type="t", **fields)]),
        timeout=T)
    assert atomic.code == grpc.StatusCode.INVALID_ARGUMENT and atomic.reason == "ATOMIC_BATCH_REJECTED"
    assert atomic.atomic is not None
    [item] = atomic.atomic.rejections
    assert item.index == 1 and (item.rejection.code, item.rejection.field) == (pb.INVALID_ARGUMENT, field)
    listed = stubs.call("ListJobs", apb.ListJobsRequest(queue=queue, state=pb.READY))
    assert [j.job.id for j in listed.jobs] == [good.ack.job_id]  # nothing of the atomic batch stored


def test_reserve_worker_id_with_nul_is_invalid_argument(stubs: AdminStubs) -> None:
    """A NUL in ``worker_id`` (stored with the lease) is InvalidArgument naming the field;
    the job stays READY and a clean worker id leases it."""
    queue = _queue()
    job_id = stubs.enqueue(queue)
    failure = fails(stubs.worker.Reserve, wpb.ReserveRequest(queues=[queue], max_jobs=1, worker_id="w" + NUL),
                    timeout=T)
    assert failure.code == grpc.StatusCode.INVALID_ARGUMENT
    assert failure.reason == "INVALID_ARGUMENT"
    assert failure.metadata.get("field") == "worker_id"
    assert "U+0000" in failure.message
    assert stubs.call("GetJob", apb.GetJobRequest(job_id=job_id)).state == pb.READY
    [got] = stubs.reserve(queue, worker_id="w")
    assert got.job.id == job_id


@pytest.mark.parametrize("verb", ["Nack", "Settle"])
def test_dead_letter_reason_with_nul_is_stored_with_replacement(stubs: AdminStubs, verb: str) -> None:
    """Finding B1: a nack ``dead_letter`` reason holding U+0000 was UNAVAILABLE /
    STORE_UNAVAILABLE ('invalid byte sequence for encoding "UTF8": 0x00') on PostgreSQL, on
    every retry (a worker runtime would retry it until the lease ran out, then the job ran
    again). The reason is free-form text like an admin cancel reason: the NUL becomes U+FFFD
    and the job is dead-lettered, on both backends alike."""
    queue = _queue()
    job_id = stubs.enqueue(queue)
    [r] = stubs.reserve(queue)
    nack = wpb.NackRequest(job_id=r.job.id, lease_id=r.lease_id, dead_letter="bad" + NUL + "input",
                           error=wpb.JobError(message="m" + NUL, detail="d" + NUL))
    if verb == "Nack":
        resp = stubs.worker.Nack(nack, timeout=T)
        assert resp.state == pb.DEAD_LETTERED
    else:
        [result] = stubs.worker.Settle(wpb.SettleRequest(items=[wpb.SettleItem(nack=nack)]), timeout=T).results
        assert result.ok, result.error_message
    job = stubs.call("GetJob", apb.GetJobRequest(job_id=job_id))
    assert job.state == pb.DEAD_LETTERED
    assert job.dead_letter_reason == "NACK_DEAD_LETTER: bad\ufffdinput"
    [attempt] = job.attempts
    assert attempt.outcome == "dead_letter" and attempt.error_message == "m" + NUL  # history is JSON: kept as is
