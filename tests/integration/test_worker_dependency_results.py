"""A handler reads its dependencies' results and outcomes, end to end on a real server (each
backend; docs/workflows.md "Reading the dependencies' results"): ``job.dependency_results()``
in ``depends_on`` order (JSON, bytes, a parent without a result as None) from a blocking
handler and ``await job.dependency_results_async()`` from an async one (the blocking call on
the loop refused), ``job.dependency_outcomes()`` of a "run" dependent whose parent was
dead-lettered (its state and error; ``dependency_results()`` raising ``JobFailed``), and a
job without dependencies reading ``{}``.
"""

from __future__ import annotations

from typing import Any

import pytest
from support.worker import make_worker, running, until

from sepp import Client, DeadLetter, EnqueueRequest, JobFailed, chain, chord
from sepp.testing import ServerProcess
from sepp.worker import Job

pytestmark = pytest.mark.timeout(120)


def _req(queue: str, job_type: str, **kw: Any) -> EnqueueRequest:
    return EnqueueRequest(queue, job_type, max_attempts=1, **kw)


async def test_results_in_depends_on_order_from_blocking_and_async_handlers(
        shared_server: ServerProcess, fresh_queue: str) -> None:
    seen: dict[str, Any] = {}

    def first(job: Job) -> dict[str, int]:
        return {"n": 1}

    def second(job: Job) -> bytes:
        return b"\x00raw"

    def third(job: Job) -> None:
        return None

    def callback(job: Job) -> str:  # blocking: runs in the worker's thread pool
        seen["results"] = job.dependency_results()
        seen["states"] = [o.state for o in job.dependency_outcomes().values()]
        return "done"

    async def after(job: Job) -> int:
        try:
            job.dependency_results()
        except RuntimeError as exc:
            seen["blocking_on_loop"] = str(exc)
        seen["async"] = await job.dependency_results_async()
        return 7

    async def plain(job: Job) -> None:
        seen["plain"] = await job.dependency_results_async()

    worker, reports = make_worker(shared_server, fresh_queue, concurrency=4)
    for name, fn in {"first": first, "second": second, "third": third, "callback": callback, "after": after,
                     "plain": plain}.items():
        worker.register(name, fn)
    q = fresh_queue
    with Client(shared_server.grpc_target) as client:
        # the header in node order 0, 1, 2; they finish in any order
        ack = client.enqueue_workflow(chord([_req(q, "third"), _req(q, "first"), _req(q, "second")],
                                            _req(q, "callback")))
        header = [a.job_id for a in ack.acks[:3]]
        step = client.enqueue(_req(q, "after", depends_on=[ack.acks[3].job_id]))
        client.enqueue(_req(q, "plain"))
        async with running(worker):
            await until(lambda: len(reports) >= 6, within=30, what="every job reported")
        assert client.result(step.job_id, timeout=10) == 7
    assert all(r.outcome == "completed" for r in reports), reports
    assert list(seen["results"].items()) == [(header[0], None), (header[1], {"n": 1}), (header[2], b"\x00raw")]
    assert seen["states"] == ["COMPLETED"] * 3
    assert seen["async"] == {ack.acks[3].job_id: "done"}
    assert "dependency_results_async" in seen["blocking_on_loop"]
    assert seen["plain"] == {}


async def test_a_run_dependent_reads_its_dead_lettered_parents_state_and_error(
        shared_server: ServerProcess, fresh_queue: str) -> None:
    seen: dict[str, Any] = {}

    def ok(job: Job) -> int:
        return 1

    def fails(job: Job) -> None:
        raise DeadLetter("the input is broken")

    def inspect(job: Job) -> str:
        outcomes = job.dependency_outcomes()
        seen["outcomes"] = {k: (o.state, o.reason, o.value() if o.completed else None) for k, o in outcomes.items()}
        try:
            job.dependency_results()
        except JobFailed as exc:
            seen["failed"] = exc.outcome.job_id
        return "inspected"

    worker, reports = make_worker(shared_server, fresh_queue, concurrency=2)
    for name, fn in {"ok": ok, "fails": fails, "inspect": inspect}.items():
        worker.register(name, fn)
    q = fresh_queue
    with Client(shared_server.grpc_target) as client:
        a = client.enqueue(_req(q, "ok"))
        b = client.enqueue(_req(q, "fails"))
        c = client.enqueue(_req(q, "inspect", depends_on=[b.job_id, a.job_id], on_dependency_failure="run"))
        async with running(worker):
            await until(lambda: len(reports) >= 3, within=30, what="every job reported")
        assert client.result(c.job_id, timeout=10) == "inspected"
    (state, reason, _), (ok_state, _, value) = seen["outcomes"][b.job_id], seen["outcomes"][a.job_id]
    assert list(seen["outcomes"]) == [b.job_id, a.job_id]
    assert state == "DEAD_LETTERED" and "the input is broken" in reason
    assert (ok_state, value) == ("COMPLETED", 1)
    assert seen["failed"] == b.job_id


def test_chain_builder_shape_is_unchanged_for_plain_requests() -> None:
    r1, r2 = EnqueueRequest("q", "a"), EnqueueRequest("q", "b")
    assert [n.job.payload.data for n in chain(r1, r2).to_proto().nodes] == [b"", b""]
