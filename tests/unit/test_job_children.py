"""``Job.enqueue_children`` on the worker side, before anything is sent: what it collects for
the ack (children in order, one ``then``), its local refusals — past 1,000 children (at the
limit and one past it, ``then`` counted), a child with an idempotency key, a second ``then``,
a value that is no request, a job run in-process — each adding nothing, and the ack's wire
form carrying them (``Outcome.fill``)."""

from __future__ import annotations

import pytest

from sepp import EnqueueRequest
from sepp.api.v1 import worker_pb2 as wpb
from sepp.hard_limits import MAX_CHILDREN
from sepp.worker import Job
from sepp.worker.job import detached_job
from sepp.worker.outcome import COMPLETED


def _job() -> Job:
    return Job(wpb.Reservation(lease_id="0190a0a0-0000-7000-8000-000000000001"))


def _kids(n: int) -> list[EnqueueRequest]:
    return [EnqueueRequest("q", "child") for _ in range(n)]


def test_children_and_then_are_collected_in_order_and_ride_on_the_ack() -> None:
    job = _job()
    job.enqueue_children([EnqueueRequest("q", "a"), EnqueueRequest("q", "b")])
    job.enqueue_children([EnqueueRequest("q", "c")], then=EnqueueRequest("q", "done"))
    kids = job._children
    assert kids is not None and [r.job_type for r in kids.requests] == ["a", "b", "c"]
    assert kids.then.job_type == "done"
    item = COMPLETED.__class__("completed", children=kids).to_settle_item("j", "l")
    assert [c.job_type for c in item.ack.children] == ["a", "b", "c"] and item.ack.then.job_type == "done"
    assert not COMPLETED.to_settle_item("j", "l").ack.HasField("then")


def test_the_count_at_the_limit_and_one_past() -> None:
    job = _job()
    job.enqueue_children(_kids(MAX_CHILDREN - 1), then=EnqueueRequest("q", "done"))
    assert job._children is not None and len(job._children.requests) == MAX_CHILDREN - 1
    with pytest.raises(ValueError, match="at most 1000 children"):
        job.enqueue_children(_kids(1))
    assert len(job._children.requests) == MAX_CHILDREN - 1  # nothing added
    other = _job()
    with pytest.raises(ValueError, match="would make 1001"):
        other.enqueue_children(_kids(MAX_CHILDREN + 1))
    assert other._children is None


def test_local_refusals_add_nothing() -> None:
    job = _job()
    with pytest.raises(ValueError, match="no idempotency key"):
        job.enqueue_children([EnqueueRequest("q", "a", idempotency_key="k")])
    with pytest.raises(TypeError):
        job.enqueue_children(["not a request"])  # type: ignore[list-item]
    assert job._children is None
    job.enqueue_children([], then=EnqueueRequest("q", "done"))
    with pytest.raises(ValueError, match="already has a `then`"):
        job.enqueue_children([], then=EnqueueRequest("q", "again"))
    with pytest.raises(RuntimeError, match="eager mode"):
        detached_job("id", "q", "t", b"", "").enqueue_children(_kids(1))
