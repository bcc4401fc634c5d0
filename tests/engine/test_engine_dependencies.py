"""Dependencies through the engine (the RPC's admission), on both backends: ``depends_on``
stores a job DEFERRED, the ack of its last dependency makes it READY and wakes a long poll of
its queue, and the catalogue's rejections — ``DependencyNotFound`` naming the id,
``DependenciesTooMany`` at 256 and one past — in single, best-effort and atomic enqueues."""

from __future__ import annotations

import asyncio
import uuid

import pytest
from support.worker import until

from engine.engine_kit import Harness, request
from sepp.api.v1 import common_pb2 as pb
from sepp.domain.ids import job_id_text
from sepp.domain.states import State
from sepp.server.errors import AtomicRejected, JobRejected

_DNF = pb.RejectionCode.DEPENDENCY_NOT_FOUND
_DTM = pb.RejectionCode.DEPENDENCIES_TOO_MANY


def _after(queue: str, *ids: bytes | str) -> pb.EnqueueRequest:
    req = request(queue)
    req.depends_on.extend(i if isinstance(i, str) else job_id_text(i) for i in ids)
    return req


async def _child(harness: Harness, *ids: bytes | str, queue: str = "child") -> bytes:
    ack = await harness.engine.enqueue(_after(queue, *ids))
    return uuid.UUID(ack.job_id).bytes


async def test_a_dependent_job_is_deferred_then_released_and_its_long_poll_woken(harness: Harness) -> None:
    notifier = harness.parts.notifier  # as sepp.server.cluster subscribes a node (PostgreSQL: the release's NOTIFY)
    harness.store.subscribe(lambda q: notifier.ready_all() if q is None else notifier.ready(q), lambda: None)
    a, _ = await harness.enqueue("dep")
    b, _ = await harness.enqueue("dep")
    child = await _child(harness, a, b, a)  # a repeated id counts once
    assert (await harness.job(child)).state == State.DEFERRED
    ra, rb = await harness.reserve("dep", 2)
    await harness.ack(ra)
    assert (await harness.job(child)).state == State.DEFERRED
    poll = asyncio.create_task(harness.engine.reserve(["child"], 1, None, 10.0, "wc"))
    await until(lambda: harness.engine.parked("wc") == 1, what="the long poll to park")
    started = asyncio.get_running_loop().time()
    await harness.ack(rb)
    got = await asyncio.wait_for(poll, 15)
    took = asyncio.get_running_loop().time() - started
    assert [r.id for r in got] == [child] and took < 5.0, (got, took)  # woken, not at the end of its wait


async def test_an_unknown_dependency_is_rejected_naming_it(harness: Harness) -> None:
    ghost = str(uuid.uuid4())
    with pytest.raises(JobRejected) as err:
        await harness.engine.enqueue(_after("child", ghost))
    rejection = err.value.rejection
    assert rejection.code == _DNF and ghost in rejection.message and rejection.field == "depends_on"


async def test_a_best_effort_batch_stores_the_others(harness: Harness) -> None:
    a, _ = await harness.enqueue("dep")
    ghost = str(uuid.uuid4())
    out = await harness.engine.enqueue_batch([_after("child", a), _after("child", ghost), request("child")])
    assert isinstance(out[0], tuple) and isinstance(out[2], tuple)
    assert isinstance(out[1], pb.Rejection) and out[1].code == _DNF and ghost in out[1].message
    assert (await harness.job(uuid.UUID(out[0][0]).bytes)).state == State.DEFERRED
    assert (await harness.job(uuid.UUID(out[2][0]).bytes)).state == State.READY


async def test_an_atomic_batch_stores_nothing(harness: Harness) -> None:
    a, _ = await harness.enqueue("dep")
    ghost = str(uuid.uuid4())
    with pytest.raises(AtomicRejected) as err:
        await harness.engine.enqueue_atomic([request("child"), _after("child", a), _after("child", ghost)])
    (only,) = err.value.rejections
    assert only.index == 2 and only.rejection.code == _DNF and ghost in only.rejection.message
    assert await harness.reserve("child") == []


async def test_256_dependencies_pass_and_257_are_too_many(harness: Harness) -> None:
    out = await harness.engine.enqueue_batch([request("dep")] * 128)
    out += await harness.engine.enqueue_batch([request("dep")] * 129)
    texts = [o[0] for o in out if isinstance(o, tuple)]
    assert len(texts) == 257
    child = await _child(harness, *texts[:256])
    assert (await harness.job(child)).state == State.DEFERRED
    with pytest.raises(JobRejected) as err:
        await harness.engine.enqueue(_after("child", *texts))
    rejection = err.value.rejection
    assert (rejection.code, rejection.limit, rejection.actual) == (_DTM, 256, 257)


async def test_a_malformed_dependency_id_is_invalid_argument(harness: Harness) -> None:
    with pytest.raises(JobRejected) as err:
        await harness.engine.enqueue(_after("child", "not-a-uuid"))
    assert err.value.rejection.code == pb.RejectionCode.INVALID_ARGUMENT
    assert err.value.rejection.field == "depends_on[0]"
