"""``Job.enqueue_children`` end to end on a real server (each backend): the children travel
with the ack and are stored in its commit; the job's dependent waits for them (or for the
``then`` callback) and runs after them exactly once; a handler that enqueues children and
then raises stores none and its job is retried; a child the server refuses (at the payload
limit and one past it, a dependency of no job) fails the attempt with the reason in the
history, and the next attempt goes on.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from support.servers import module_server
from support.worker import count_states, make_worker, running, until, wire_for

from sepp import EnqueueRequest, Payload
from sepp.api.v1 import common_pb2 as pb
from sepp.testing import ServerProcess
from sepp.worker import Job

pytestmark = pytest.mark.timeout(90)

#: The queues' max_payload_bytes on this server.
LIMIT = 1024


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory, backend: str) -> Iterator[ServerProcess]:
    yield from module_server(tmp_path_factory, backend, queue_defaults={
        "lease_duration": 30.0, "retry_base": 0.05, "retry_jitter": 0.0, "limits": {"max_payload_bytes": LIMIT}})


def _parent_and_dependent(srv: ServerProcess, queue: str, max_attempts: int = 3) -> tuple[str, str]:
    """A job of type "parent" on ``queue`` and a job of type "after" that depends on it."""
    with wire_for(srv, queue) as w:
        parent = w.enqueue(queue, "parent", max_attempts=max_attempts)
        after = w.enqueue(queue, "after", depends_on=[parent])
    return parent, after


async def _run(srv: ServerProcess, queue: str, handlers: dict[str, Any], reports_wanted: int) -> list[Any]:
    """Run a worker on ``queue`` with ``handlers`` until it reported ``reports_wanted``
    outcomes; the reports."""
    worker, reports = make_worker(srv, queue, concurrency=4)
    for job_type, fn in handlers.items():
        worker.register(job_type, fn)
    async with running(worker):
        await until(lambda: len(reports) >= reports_wanted, within=60, what=f"{reports_wanted} reports")
    return reports


async def test_children_run_and_the_dependent_runs_after_them_once(srv: ServerProcess, fresh_queue: str) -> None:
    parent, after = _parent_and_dependent(srv, fresh_queue)
    ran: list[str] = []

    async def spawn(job: Job) -> None:
        job.enqueue_children([EnqueueRequest(fresh_queue, "child", payload=Payload(bytes([i]))) for i in range(3)])
        ran.append("parent")

    async def child(job: Job) -> None:
        ran.append("child")

    async def last(job: Job) -> None:
        ran.append("after")

    reports = await _run(srv, fresh_queue, {"parent": spawn, "child": child, "after": last}, 5)
    assert [r for r in reports if r.refused] == []
    assert ran[0] == "parent" and sorted(ran[1:4]) == ["child"] * 3 and ran[4:] == ["after"]
    assert count_states(srv, fresh_queue) == {"COMPLETED": 5}
    with wire_for(srv) as w:
        assert w.get_job(after).state == pb.COMPLETED and w.get_job(parent).state == pb.COMPLETED


async def test_a_handler_that_raises_after_enqueue_children_stores_none_and_is_retried(
        srv: ServerProcess, fresh_queue: str) -> None:
    parent, _after = _parent_and_dependent(srv, fresh_queue)
    ran: list[str] = []

    async def spawn(job: Job) -> None:
        job.enqueue_children([EnqueueRequest(fresh_queue, "child")])
        if job.attempt == 1:
            raise RuntimeError("failed after enqueue_children")
        ran.append("parent")

    async def child(job: Job) -> None:
        ran.append("child")

    async def last(job: Job) -> None:
        ran.append("after")

    reports = await _run(srv, fresh_queue, {"parent": spawn, "child": child, "after": last}, 4)
    assert [r.outcome for r in reports[:1]] == ["retry"]
    assert ran == ["parent", "child", "after"]  # one child: the failed attempt's was never stored
    assert count_states(srv, fresh_queue) == {"COMPLETED": 3}
    with wire_for(srv) as w:
        job = w.get_job(parent)
    assert [a.outcome for a in job.attempts][:1] == ["retry"] and job.attempt == 2


async def test_then_runs_after_every_child_and_the_dependent_after_then(
        srv: ServerProcess, fresh_queue: str) -> None:
    _parent_and_dependent(srv, fresh_queue)
    ran: list[str] = []

    async def spawn(job: Job) -> None:
        job.enqueue_children([EnqueueRequest(fresh_queue, "child") for _ in range(4)],
                             then=EnqueueRequest(fresh_queue, "then"))

    def step(name: str) -> Any:
        async def handler(job: Job) -> None:
            ran.append(name)
        return handler

    await _run(srv, fresh_queue, {"parent": spawn, "child": step("child"), "then": step("then"),
                                  "after": step("after")}, 7)
    assert ran == ["child"] * 4 + ["then", "after"]


async def test_a_child_the_server_refuses_fails_the_attempt_at_the_limit_and_one_past(
        srv: ServerProcess, fresh_queue: str) -> None:
    parent, _after = _parent_and_dependent(srv, fresh_queue)
    sizes = {1: LIMIT + 1, 2: LIMIT}  # attempt → the child's payload size

    async def spawn(job: Job) -> None:
        job.enqueue_children([EnqueueRequest(fresh_queue, "child", payload=Payload(b"x" * sizes[job.attempt]))])

    async def quiet(job: Job) -> None:
        return None

    reports = await _run(srv, fresh_queue, {"parent": spawn, "child": quiet, "after": quiet}, 4)
    refused = [r for r in reports if r.refused]
    assert [r.refused for r in refused] == ["PAYLOAD_TOO_LARGE"]
    with wire_for(srv) as w:
        job = w.get_job(parent)
    assert job.state == pb.COMPLETED and job.attempt == 2
    assert job.attempts[0].outcome == "retry"
    assert job.attempts[0].error_message.startswith("PayloadTooLarge: children[0]: ")
    assert count_states(srv, fresh_queue) == {"COMPLETED": 3}


async def test_a_child_depending_on_no_job_fails_the_attempt(srv: ServerProcess, fresh_queue: str) -> None:
    parent, _after = _parent_and_dependent(srv, fresh_queue)
    ghost = str(uuid.uuid4())

    async def spawn(job: Job) -> None:
        if job.attempt == 1:
            job.enqueue_children([EnqueueRequest(fresh_queue, "child", depends_on=[ghost])])

    async def quiet(job: Job) -> None:
        return None

    reports = await _run(srv, fresh_queue, {"parent": spawn, "child": quiet, "after": quiet}, 3)
    assert [r.refused for r in reports if r.refused] == ["DEPENDENCY_NOT_FOUND"]
    with wire_for(srv) as w:
        job = w.get_job(parent)
    assert job.attempts[0].error_message.startswith(f"DependencyNotFound: child 0 depends on job {ghost}")
    assert count_states(srv, fresh_queue) == {"COMPLETED": 2}
