"""Children an ack carries (``AckRequest.children`` / ``then``) through the real engine and
store with a fake clock, on each backend: the children admitted as enqueues and stored with
the completion; their count at the limit (1,000, the callback included) and one past it; a
child that fails its checks (its field named ``children[i].`` or ``then.``) or carries an
idempotency key failing the attempt — retried after the queue's backoff by the fake clock,
the catalogued reason first in the history — and storing nothing; a batched Settle mixing
acks with and without children.
"""

from __future__ import annotations

import json
from typing import Any

from engine.engine_kit import Harness, HarnessFactory, S, request
from sepp.api.v1 import common_pb2 as pb
from sepp.api.v1 import worker_pb2 as wpb
from sepp.domain.ids import job_id_text
from sepp.domain.params import SettleParams, SettleResult
from sepp.domain.records import JobRecord
from sepp.domain.states import State
from sepp.hard_limits import MAX_CHILDREN
from sepp.server.rpc.worker import settle_params

QUEUES = {"q": {"retry_base": 2.0, "retry_jitter": 0.0}, "kids": {}}


def _ack(job: JobRecord, children: list[pb.EnqueueRequest], then: pb.EnqueueRequest | None = None
         ) -> wpb.AckRequest:
    ack = wpb.AckRequest(job_id=job_id_text(job.id), lease_id=job_id_text(job.lease_id or b""), children=children)
    if then is not None:
        ack.then.CopyFrom(then)
    return ack


async def _settle(h: Harness, ack: wpb.AckRequest) -> tuple[SettleParams, pb.Rejection | None, SettleResult]:
    """The ack as the servicer applies it: parsed, its children attached, settled, told."""
    params = settle_params(ack, h.now, 16 * 1024)
    then = ack.then if ack.HasField("then") else None
    params, refused = await h.engine.attach_children(params, ack.children, then)
    (result,) = await h.engine.settle([params])
    h.engine.children_told([params], [result])
    return params, refused, result


def _history(rec: JobRecord) -> list[dict[str, Any]]:
    return json.loads(rec.history) if rec.history else []


async def _leased(h: Harness) -> JobRecord:
    await h.enqueue("q")
    (job,) = await h.reserve("q")
    return job


async def test_children_are_admitted_and_stored_with_the_completion(make_harness: HarnessFactory) -> None:
    h = await make_harness(queues=QUEUES)
    job = await _leased(h)
    params, refused, result = await _settle(h, _ack(job, [request("kids"), request("kids")], request("kids")))
    assert refused is None and params.children is not None
    assert result.state == int(State.COMPLETED)
    ids = [row.id for row in params.children.rows]
    assert [(await h.job(i)).state for i in ids] == [State.READY, State.READY, State.DEFERRED]
    kids = await h.reserve("kids", 10)
    assert sorted(r.id for r in kids) == sorted(ids[:2])
    for kid in kids:
        assert (await h.ack(kid)).state == int(State.COMPLETED)
    (then,) = await h.reserve("kids", 10)
    assert then.id == ids[2]


async def test_the_count_at_the_limit_and_one_past(make_harness: HarnessFactory) -> None:
    h = await make_harness(queues=QUEUES)
    job = await _leased(h)
    at_limit = [request("kids") for _ in range(MAX_CHILDREN - 1)]
    params, refused, result = await _settle(h, _ack(job, at_limit, request("kids")))
    assert refused is None and result.state == int(State.COMPLETED)
    assert params.children is not None and len(params.children.rows) == MAX_CHILDREN
    taken = 0
    while batch := await h.reserve("kids", 256):
        taken += len(batch)
    assert taken == MAX_CHILDREN - 1

    job = await _leased(h)
    params, refused, result = await _settle(h, _ack(job, [request("kids") for _ in range(MAX_CHILDREN)],
                                                    request("kids")))
    assert refused is not None
    assert (refused.code, refused.field, refused.limit, refused.actual) == (
        pb.INVALID_ARGUMENT, "children", MAX_CHILDREN, MAX_CHILDREN + 1)
    assert params.children is None and result.state == int(State.SCHEDULED)
    assert result.run_at == h.now + 2 * S  # the queue's backoff: a failed attempt
    (entry,) = _history(await h.job(job.id))
    assert entry["outcome"] == "retry" and entry["error_message"].startswith("InvalidArgument: an ack carries at most")
    assert await h.reserve("kids", 10) == []


async def test_a_refused_child_names_its_field_fails_the_attempt_and_stores_nothing(
        make_harness: HarnessFactory) -> None:
    h = await make_harness(queues=QUEUES)
    job = await _leased(h)
    bad = request("kids")
    bad.queue = "not a queue!"
    _params, refused, result = await _settle(h, _ack(job, [request("kids"), bad]))
    assert refused is not None and (refused.code, refused.field) == (pb.QUEUE_NAME_INVALID, "children[1].queue")
    assert result.state == int(State.SCHEDULED)
    (entry,) = _history(await h.job(job.id))
    assert entry["error_message"].startswith("QueueNameInvalid: children[1]: ")
    assert await h.reserve("kids", 10) == []

    h.clock.advance(2.0)  # the backoff passes: the job runs again, and this time completes
    (again,) = await h.reserve("q")
    assert again.id == job.id and again.attempt == 2
    keyed = request("kids", key="mine")
    _params, refused, _result = await _settle(h, _ack(again, [], keyed))
    assert refused is not None and refused.field == "then.idempotency_key"
    h.clock.advance(4.0)
    (third,) = await h.reserve("q")
    _params, refused, result = await _settle(h, _ack(third, [request("kids")]))
    assert refused is None and result.state == int(State.COMPLETED)
    assert len(await h.reserve("kids", 10)) == 1


async def test_a_settle_mixing_acks_with_and_without_children(make_harness: HarnessFactory) -> None:
    h = await make_harness(queues=QUEUES)
    for _ in range(3):
        await h.enqueue("q")
    jobs = await h.reserve("q", 3)
    params = [settle_params(_ack(j, []), h.now, 16 * 1024) for j in jobs]
    with_kids, refused = await h.engine.attach_children(params[1], [request("kids"), request("kids")], None)
    assert refused is None
    params[1] = with_kids
    results = await h.engine.settle(params)
    h.engine.children_told(params, results)
    assert [r.state for r in results] == [int(State.COMPLETED)] * 3
    assert len(await h.reserve("kids", 10)) == 2
