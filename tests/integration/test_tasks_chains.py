"""Tasks in workflows pass results along, end to end on a real ``sepp serve`` (each backend;
docs/tasks.md "Chains pass results"): a ``chain`` step made with ``task.s`` receives the
previous step's return value as its first argument, a ``.si`` step receives nothing, a
``chord`` callback made with ``task.s`` receives its header's results as a list in header
order (sync and async tasks), a plain ``EnqueueRequest`` node gets nothing put in its
payload, a step that cannot take the result is refused when the chain is built, and a job
another language sent with ``"prepend"`` but no dependency is dead-lettered naming why.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from support.worker import running

import sepp
from sepp import Client, EnqueueRequest, JobFailed, Payload, chain, chord
from sepp.testing import ServerProcess

pytestmark = pytest.mark.timeout(120)


def make_app(srv: ServerProcess, queue: str) -> sepp.App:
    app = sepp.App(srv.grpc_target, poll_wait=0.5, concurrency=4)

    @app.task(queue=queue, name="add")
    def add(x: int, y: int) -> int:
        return x + y

    @app.task(queue=queue, name="mul")
    async def mul(x: int, y: int) -> int:
        await asyncio.sleep(0)
        return x * y

    @app.task(queue=queue, name="total")
    def total(values: list[int], extra: int = 0) -> int:
        return sum(values) + extra

    @app.task(queue=queue, name="show")
    async def show(value: Any) -> str:
        return json.dumps(value)

    return app


async def test_a_chain_passes_each_result_to_the_next_mutable_step(shared_server: ServerProcess,
                                                                   fresh_queue: str) -> None:
    app = make_app(shared_server, fresh_queue)
    add, mul = app.tasks["add"], app.tasks["mul"]
    async with running(app.worker()):

        def produce() -> list[list[Any]]:
            with Client(shared_server.grpc_target) as client:
                out = []
                for wf in (chain(add.s(1, 2), add.s(10), mul.si(3, 4)),      # 3, 3 + 10, 12 (takes nothing)
                           chain(add.s(1, 2), add.s(10), mul.s(2))):        # 3, 13, 26 (async step)
                    ack = client.enqueue_workflow(wf)
                    out.append([client.result(a.job_id, timeout=30) for a in ack.acks])
                return out

        results = await asyncio.to_thread(produce)
    assert results == [[3, 13, 12], [3, 13, 26]]


async def test_a_chord_callback_receives_the_header_results_in_header_order(shared_server: ServerProcess,
                                                                            fresh_queue: str) -> None:
    app = make_app(shared_server, fresh_queue)
    add, mul, total, show = (app.tasks[n] for n in ("add", "mul", "total", "show"))
    async with running(app.worker()):

        def produce() -> list[Any]:
            with Client(shared_server.grpc_target) as client:
                a = client.enqueue_workflow(chord([mul.s(5, 5), add.s(1, 2), mul.s(2, 3)], total.s(extra=100)))
                b = client.enqueue_workflow(chord([add.s(1, 1), add.s(2, 2)], show.s()))
                c = client.enqueue_workflow(chord([add.s(1, 1)], total.si([7], 1)))   # immutable: [7] + 1
                return [client.result(ack.acks[-1].job_id, timeout=30) for ack in (a, b, c)]

        results = await asyncio.to_thread(produce)
    assert results == [25 + 3 + 6 + 100, "[2, 4]", 8]


def test_requests_get_nothing_and_a_step_that_cannot_take_the_result_is_refused() -> None:
    app = sepp.App("localhost:1")

    @app.task(queue="q", name="add")
    def add(x: int, y: int) -> int:
        return x + y

    nodes = chain(EnqueueRequest("q", "a"), EnqueueRequest("q", "b", payload=Payload.json({"k": 1})),
                  add.si(1, 2), add.s(3)).to_proto().nodes
    assert [json.loads(n.job.payload.data or b"null") for n in nodes] == [
        None, {"k": 1}, {"args": [1, 2], "kwargs": {}}, {"args": [3], "kwargs": {}, "prepend": "result"}]
    with pytest.raises(TypeError, match="as a workflow step it receives the previous result"):
        chain(add.s(1), add.s(1, 2))  # the second has both arguments already
    with pytest.raises(TypeError, match="as a workflow step"):
        chord([add.s(1, 2)], add.s(x=1, y=2))
    # the first step and a group member receive nothing, so a full .s() is fine there
    assert chain(add.s(1, 2)).to_proto().nodes[0].job.payload.data == b'{"args":[1,2],"kwargs":{}}'
    with pytest.raises(ValueError, match="prepend"):
        sepp.Workflow().add(add.s(1), prepend="all")


async def test_prepend_without_a_dependency_dead_letters_the_job(shared_server: ServerProcess,
                                                                 fresh_queue: str) -> None:
    app = make_app(shared_server, fresh_queue)
    body = json.dumps({"args": [5], "kwargs": {}, "prepend": "result"}).encode()
    bad = json.dumps({"args": [5], "prepend": "everything"}).encode()
    async with running(app.worker()):

        def produce() -> list[str]:
            with Client(shared_server.grpc_target) as client:
                out = []
                for data in (body, bad):
                    ack = client.enqueue(EnqueueRequest(fresh_queue, "add", payload=Payload(data, "application/json"),
                                                        max_attempts=3))
                    with pytest.raises(JobFailed) as err:
                        client.result(ack.job_id, timeout=30)
                    assert err.value.outcome.attempt == 1  # at once, not retried
                    out.append(err.value.reason)
                return out

        reasons = await asyncio.to_thread(produce)
    assert "depends on no job" in reasons[0]
    assert '"prepend" must be "result" or "results"' in reasons[1]
