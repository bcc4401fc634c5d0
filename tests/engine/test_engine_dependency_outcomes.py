"""A handler's read of its dependencies' outcomes (``JobEngine.dependency_outcomes``, the
``DependencyOutcomes`` RPC; docs/workflows.md "Reading the dependencies' results"), on both
backends with a fake clock: the outcomes in ``depends_on`` order with their results, a
dead-lettered parent of a "run" dependent with its state and error, a purged parent as a
gap, answers split at ``max_message_bytes``, and the lease fence."""

from __future__ import annotations

import uuid

import pytest

from engine.engine_kit import Harness, HarnessFactory, request
from sepp.api.v1 import common_pb2 as pb
from sepp.api.v1 import producer_pb2 as ppb
from sepp.api.v1 import worker_pb2 as wpb
from sepp.domain.ids import job_id_text
from sepp.domain.outcomes import JobOutcome
from sepp.domain.params import SettleError
from sepp.domain.records import JobRecord
from sepp.domain.states import State
from sepp.server.errors import InvalidRequest, LeaseRefused
from sepp.server.rpc.worker import settle_params


async def _ack(h: Harness, rec: JobRecord, data: bytes | None, encoding: str = "application/json") -> None:
    req = wpb.AckRequest(job_id=job_id_text(rec.id), lease_id=job_id_text(rec.lease_id or b""))
    if data is not None:
        req.result.CopyFrom(pb.Payload(data=data, encoding=encoding))
    await h.engine.settle_one(settle_params(req, h.now, 16 * 1024))


async def _chord(h: Harness, n: int, policy: pb.DependencyFailure.ValueType | None = None) -> list[bytes]:
    """A chord of ``n`` children (queue ``kids``) and a callback (queue ``cb``); every id."""
    cb = request("cb")
    if policy is not None:
        cb.on_dependency_failure = policy
    nodes = [ppb.WorkflowNode(job=request("kids")) for _ in range(n)]
    nodes.append(ppb.WorkflowNode(job=cb, after=list(range(n))))
    ack = await h.engine.enqueue_workflow(nodes)
    return [uuid.UUID(job_id).bytes for job_id, _ in ack.acks]


async def _read(h: Harness, rec: JobRecord, offset: int = 0) -> tuple[int, list[tuple[bytes, JobOutcome | None]]]:
    return await h.engine.dependency_outcomes(job_id_text(rec.id), job_id_text(rec.lease_id or b""), offset)


async def test_outcomes_come_in_depends_on_order_with_their_results(harness: Harness) -> None:
    h = harness
    ids = await _chord(h, 3)
    kids = {r.id: r for r in await h.reserve("kids", 3)}
    # acked in reverse order; the answer keeps the order of depends_on
    await _ack(h, kids[ids[2]], None)
    await _ack(h, kids[ids[1]], b"\x00\x01", "application/octet-stream")
    await _ack(h, kids[ids[0]], b'{"n":1}')
    (cb,) = await h.reserve("cb")
    total, got = await _read(h, cb)
    assert total == 3
    assert [dep for dep, _ in got] == ids[:3]
    outcomes = [o for _, o in got if o is not None]
    assert len(outcomes) == 3 and all(o.state == State.COMPLETED for o in outcomes)
    assert [(o.result, o.result_encoding) for o in outcomes] == [
        (b'{"n":1}', "application/json"), (b"\x00\x01", "application/octet-stream"), (None, None)]


async def test_a_job_without_dependencies_reads_none(harness: Harness) -> None:
    await harness.enqueue("plain")
    (rec,) = await harness.reserve("plain")
    assert await _read(harness, rec) == (0, [])


async def test_a_run_dependent_sees_its_dead_lettered_parent_and_the_error(harness: Harness) -> None:
    h = harness
    ids = await _chord(h, 2, pb.DEPENDENCY_FAILURE_RUN)
    first, second = await h.reserve("kids", 2)
    await _ack(h, first, b"1")
    await h.nack(second, dead_letter="bad input", message="ValueError: bad input")
    (cb,) = await h.reserve("cb")
    total, got = await _read(h, cb)
    by_id = dict(got)
    assert total == 2 and list(by_id) == ids[:2]
    failed = by_id[second.id]
    assert failed is not None and failed.state == State.DEAD_LETTERED
    assert failed.reason is not None and failed.reason.startswith("NACK_DEAD_LETTER") and "bad input" in failed.reason
    assert failed.last_error() == "ValueError: bad input"


async def test_a_purged_parent_is_a_gap(make_harness: HarnessFactory) -> None:
    h = await make_harness(queues={"kids": {"completed_retention": 60.0}})
    ids = await _chord(h, 2)
    for rec in await h.reserve("kids", 2):
        await _ack(h, rec, b"2")
    (cb,) = await h.reserve("cb", lease_s=3600)  # RESERVED while its parents' retention passes
    h.clock.advance(61)
    assert (await h.sweeper.run_once())["prune"].count == 2
    total, got = await _read(h, cb)
    assert total == 2 and got == [(ids[0], None), (ids[1], None)]


async def test_an_answer_holds_what_fits_and_the_rest_comes_from_the_offset(make_harness: HarnessFactory) -> None:
    h = await make_harness(limits={"max_message_bytes": 1024 * 1024})
    ids = await _chord(h, 5)
    big = b'"' + b"x" * (300 * 1024) + b'"'  # three fit the 960 KiB an answer has for outcomes
    for rec in await h.reserve("kids", 5):
        await _ack(h, rec, big)
    (cb,) = await h.reserve("cb")
    total, first = await _read(h, cb)
    assert total == 5 and [dep for dep, _ in first] == ids[:3]
    total, rest = await _read(h, cb, 3)
    assert total == 5 and [dep for dep, _ in rest] == ids[3:5]
    assert await _read(h, cb, 5) == (5, [])
    total, one = await _read(h, cb, 4)
    assert [dep for dep, _ in one] == [ids[4]]


async def test_only_the_lease_holder_may_read(harness: Harness) -> None:
    h = harness
    ids = await _chord(h, 1)
    (kid,) = await h.reserve("kids")
    await _ack(h, kid, b"1")
    (cb,) = await h.reserve("cb")
    text = job_id_text(cb.id)
    with pytest.raises(LeaseRefused) as err:
        await h.engine.dependency_outcomes(text, str(uuid.uuid4()))
    assert err.value.error is SettleError.LEASE_MISMATCH
    with pytest.raises(LeaseRefused) as err:
        await h.engine.dependency_outcomes(str(uuid.uuid4()), job_id_text(cb.lease_id or b""))
    assert err.value.error is SettleError.NOT_FOUND
    with pytest.raises(InvalidRequest) as bad:
        await h.engine.dependency_outcomes("nope", job_id_text(cb.lease_id or b""))
    assert bad.value.field == "job_id"
    with pytest.raises(InvalidRequest) as bad:
        await _read(h, cb, -1)
    assert bad.value.field == "offset"
    await _ack(h, cb, None)  # settled: its lease no longer holds
    with pytest.raises(LeaseRefused) as err:
        await _read(h, cb)
    assert err.value.error is SettleError.LEASE_MISMATCH
    assert ids[1] == cb.id
