"""Batch and atomic enqueue, over the wire (seed "Batch & atomic enqueue"; SPEC §2, §6).

Covers: the batch caps of both calls (0 and 257 refused whole with INVALID_ARGUMENT,
ErrorInfo reason INVALID_ARGUMENT, field ``jobs``, limit 256, actual; 1 and 256
accepted) with nothing stored from a refused batch; results in request order (each
ack names the job built from its request); best effort in EnqueueBatch; all or
nothing in EnqueueAtomic — proven through the API: the failed call's keys were never
claimed, nothing is reservable and no on-demand queue appeared.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import grpc
import pytest
from support.failures import fails
from support.producer import Stubs, connect, job

from sepp.api.v1 import common_pb2 as pb
from sepp.api.v1 import producer_pb2 as ppb
from sepp.testing import ServerProcess


def _keys(n: int) -> list[str]:
    base = uuid.uuid4().hex
    return [f"{base}-{i}" for i in range(n)]


@pytest.fixture
def s(shared_server: ServerProcess) -> Iterator[Stubs]:
    """Stubs on the module's shared default server."""
    with connect(shared_server.grpc_target) as stubs:
        yield stubs


@pytest.mark.parametrize("call", ["batch", "atomic"])
@pytest.mark.parametrize("size", [0, 257])
def test_an_empty_or_over_cap_batch_is_refused_whole(s: Stubs, call: str, size: int) -> None:
    """0 or 257 jobs: INVALID_ARGUMENT / ErrorInfo INVALID_ARGUMENT (jobs, 256, size); no job
    stored and no key claimed."""
    keys = _keys(size)
    queue = f"cap-{call}-{size}"  # the module shares one server: a queue of its own
    failure = fails(getattr(s, call), [job(queue, f"t{i}", key=k) for i, k in enumerate(keys)])
    assert failure.code == grpc.StatusCode.INVALID_ARGUMENT
    info = failure.error_info
    assert info is not None and (info.reason, info.domain) == ("INVALID_ARGUMENT", "sepp")
    assert dict(info.metadata) == {"field": "jobs", "limit": "256", "actual": str(size)}
    assert s.reserve_all([queue]) == []
    assert queue not in {q.name for q in s.info().queues}, "a refused batch created its queue"
    if keys:
        results = s.batch(job(queue, key=k) for k in keys[:256])
        assert [r.ack.deduplicated for r in results] == [False] * 256, "the refused batch claimed keys"


@pytest.mark.parametrize("call", ["batch", "atomic"])
@pytest.mark.parametrize("size", [1, 256])
def test_one_and_256_jobs_are_accepted_in_request_order(s: Stubs, call: str, size: int) -> None:
    """1 and 256 jobs: one ack per job, in request order — ack i names the job built from
    request i — and FIFO delivery follows the request order."""
    queue = f"ok-{call}-{size}"
    out = getattr(s, call)([job(queue, f"t{i}") for i in range(size)])
    acks = [r.ack for r in out] if call == "batch" else out
    assert len(acks) == size and len({a.job_id for a in acks}) == size
    assert not any(a.deduplicated for a in acks)
    jobs = s.reserve_all([queue])
    assert [j.job_type for j in jobs] == [f"t{i}" for i in range(size)]
    assert [j.id for j in jobs] == [a.job_id for a in acks]


def test_enqueue_batch_is_best_effort(s: Stubs) -> None:
    """Valid jobs of a batch are stored even when their neighbours are refused."""
    results = s.batch([job("be", "a"), job("be", "b", priority=42), job("bad name", "c"), job("be", "d")])
    assert [r.WhichOneof("outcome") for r in results] == ["ack", "rejection", "rejection", "ack"]
    assert {j.id: j.job_type for j in s.reserve_all(["be"])} == {results[0].ack.job_id: "a",
                                                                 results[3].ack.job_id: "d"}


def test_a_failed_atomic_call_stores_nothing(s: Stubs) -> None:
    """One bad job in EnqueueAtomic: nothing is reservable, the good jobs' idempotency keys
    were never claimed (re-sending them creates jobs, deduplicated=False) and the on-demand
    queue the batch named was never created."""
    keys = _keys(5)
    reqs = [job("atom", f"good{i}", key=k) for i, k in enumerate(keys)]
    reqs.insert(3, job("atom", "bad", custom={"x": float("nan")}))
    failure = fails(s.atomic, reqs)
    assert failure.code == grpc.StatusCode.INVALID_ARGUMENT
    assert failure.atomic is not None and [r.index for r in failure.atomic.rejections] == [3]
    assert s.reserve_all(["atom"]) == []
    assert "atom" not in {q.name for q in s.info().queues}, "a rolled-back atomic call created its queue"
    acks = s.atomic([job("atom", f"good{i}", key=k) for i, k in enumerate(keys)])
    assert [a.deduplicated for a in acks] == [False] * 5, "the failed call claimed keys"
    assert [j.job_type for j in s.reserve_all(["atom"])] == [f"good{i}" for i in range(5)]


def test_a_failed_atomic_call_with_an_already_used_key_still_stores_nothing(s: Stubs) -> None:
    """An atomic call whose jobs include a deduplicating key and a bad job: no new job, and
    the original keeps its id."""
    old, new = _keys(2)
    original = s.enqueue(job("atom2", "orig", key=old))
    failure = fails(s.atomic, [job("atom2", "dup", key=old), job("atom2", "fresh", key=new),
                               job("atom2", "", key="x")])
    assert failure.atomic is not None and [r.index for r in failure.atomic.rejections] == [2]
    assert [j.id for j in s.reserve_all(["atom2"])] == [original.job_id]
    ack = s.enqueue(job("atom2", "fresh", key=new))
    assert ack.deduplicated is False


def test_plain_jobs_by_column_follow_the_requests_and_are_checked_one_by_one(s: Stubs) -> None:
    """``EnqueueBatchRequest.plain`` (the Python client's form, feature ``enqueue_batch_plain``):
    its jobs follow ``jobs``, run after run; each is checked alone (a bad one is rejected, its
    neighbours stored), they count against the cap with ``jobs``, and an atomic call takes them."""
    assert "enqueue_batch_plain" in s.info().features
    queue = "by-column"
    runs = [pb.PlainJobs(queue=queue, job_type="p1", encoding="e", data=[b"1", b""]),
            pb.PlainJobs(queue="bad name", job_type="p2", data=[b"2"]),
            pb.PlainJobs(queue=queue, job_type="p3", data=[b"3" * (1024 * 1024 + 1), b"4"])]
    results = s.producer.EnqueueBatch(ppb.EnqueueBatchRequest(jobs=[job(queue, "j0")], plain=runs)).results
    assert [r.WhichOneof("outcome") for r in results] == ["ack", "ack", "ack", "rejection", "rejection", "ack"]
    assert [r.rejection.code for r in results if r.HasField("rejection")] == [
        pb.QUEUE_NAME_INVALID, pb.PAYLOAD_TOO_LARGE]
    jobs = s.reserve_all([queue])
    assert [(j.job_type, j.payload.data, j.payload.encoding) for j in jobs] == [
        ("j0", b"", ""), ("p1", b"1", "e"), ("p1", b"", "e"), ("p3", b"4", "")]
    assert [j.id for j in jobs] == [results[i].ack.job_id for i in (0, 1, 2, 5)]
    over = ppb.EnqueueBatchRequest(jobs=[job(queue)], plain=[pb.PlainJobs(queue=queue, job_type="t", data=[b""] * 256)])
    failure = fails(s.producer.EnqueueBatch, over)
    assert failure.code == grpc.StatusCode.INVALID_ARGUMENT and failure.error_info is not None
    assert dict(failure.error_info.metadata) == {"field": "jobs", "limit": "256", "actual": "257"}
    acks = s.producer.EnqueueAtomic(ppb.EnqueueBatchRequest(plain=[pb.PlainJobs(queue=queue, job_type="a",
                                                                                data=[b"x", b"y"])])).acks
    assert [j.id for j in s.reserve_all([queue])] == [a.job_id for a in acks] and len(acks) == 2
