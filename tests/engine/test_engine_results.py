"""A job's result through the real engine and store with a fake clock, on each backend: the
ack (alone and batched in a Settle) stores what the handler returned in the commit that
completes the job; a result over the queue's ``max_result_bytes`` (at the limit and one past
it) is refused and the attempt retried per the queue's policy with the reason in the history;
a return value JSON cannot encode fails the attempt with the worker's reason; the result is
deleted with the job at the completed retention.

Acks and nacks go in as the wire messages a worker sends (``Outcome.to_settle_item``, read
by the servicer's own ``settle_params``).
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from engine.engine_kit import Harness, HarnessFactory, S
from sepp.api.v1 import common_pb2 as pb
from sepp.api.v1 import worker_pb2 as wpb
from sepp.domain.ids import job_id_text
from sepp.domain.records import JobRecord
from sepp.domain.states import State
from sepp.domain.transitions import result_refused
from sepp.server.admin.engine import AdminEngine
from sepp.server.errors import InvalidRequest
from sepp.server.rpc.worker import settle_params
from sepp.worker.outcome import Outcome, returned

LIMIT = 16
QUEUES = {"q": {"limits": {"max_result_bytes": LIMIT}, "retry_base": 1.0, "retry_jitter": 0.0,
                "completed_retention": 60.0}}


def _item(job: JobRecord, outcome: Outcome) -> wpb.AckRequest | wpb.NackRequest:
    """The ack or nack a worker sends for ``outcome`` of ``job``'s delivery."""
    item = outcome.to_settle_item(job_id_text(job.id), job_id_text(job.lease_id or b""))
    return getattr(item, item.WhichOneof("kind") or "ack")  # type: ignore[no-any-return]


async def _settle(h: Harness, *pairs: tuple[JobRecord, Any]) -> list[Any]:
    """Settle each (job, what its handler returned) in one call, as the worker would."""
    params = [settle_params(_item(job, returned(value, LIMIT)), h.now, 16 * 1024) for job, value in pairs]
    return await h.engine.settle(params)


def _history(rec: JobRecord) -> list[dict[str, Any]]:
    return json.loads(rec.history) if rec.history else []


async def test_a_lone_ack_stores_the_handlers_result_with_the_completion(make_harness: HarnessFactory) -> None:
    h = await make_harness(queues=QUEUES)
    job_id, _ = await h.enqueue()
    (job,) = await h.reserve()
    req = wpb.AckRequest(job_id=job_id_text(job.id), lease_id=job_id_text(job.lease_id or b""),
                         result=pb.Payload(data=b'{"n":1}', encoding="application/json"))
    result = await h.engine.settle_one(settle_params(req, h.now, 16 * 1024))
    assert result.state == int(State.COMPLETED)
    done = await h.job(job_id)
    assert (done.state, done.result, done.result_encoding, done.finished_at) == (
        int(State.COMPLETED), b'{"n":1}', "application/json", h.now)


async def test_a_settle_stores_each_result_and_none_for_none(make_harness: HarnessFactory) -> None:
    h = await make_harness(queues=QUEUES)
    for _ in range(4):
        await h.enqueue()
    jobs = await h.reserve(n=4)
    values = [{"ok": True}, None, b"\x00raw", "text"]
    results = await _settle(h, *zip(jobs, values, strict=True))
    assert [r.state for r in results] == [int(State.COMPLETED)] * 4
    stored = [await h.job(j.id) for j in jobs]
    assert [(s.result, s.result_encoding) for s in stored] == [
        (b'{"ok":true}', "application/json"), (None, None), (b"\x00raw", "application/octet-stream"),
        (b'"text"', "application/json")]


async def test_the_server_refuses_a_result_one_past_the_queues_limit(make_harness: HarnessFactory) -> None:
    # A worker that does not check (or checked an older limit): the server judges each ack.
    h = await make_harness(queues=QUEUES)
    for _ in range(2):
        await h.enqueue()
    at, past = await h.reserve(n=2)
    items = []
    for job, size in ((at, LIMIT), (past, LIMIT + 1)):
        req = wpb.AckRequest(job_id=job_id_text(job.id), lease_id=job_id_text(job.lease_id or b""),
                             result=pb.Payload(data=b"x" * size, encoding="application/octet-stream"))
        items.append(settle_params(req, h.now, 16 * 1024))
    ok, refused = await h.engine.settle(items)
    assert (ok.state, result_refused(items[0], ok)) == (int(State.COMPLETED), False)
    assert (refused.state, refused.run_at, result_refused(items[1], refused)) == (int(State.SCHEDULED), h.now + S,
                                                                                  True)
    assert (await h.job(at.id)).result == b"x" * LIMIT
    back = await h.job(past.id)
    assert (back.state, back.result, back.attempt) == (int(State.SCHEDULED), None, 1)
    assert _history(back)[0]["error_message"].startswith("ResultTooLarge: the handler's result is 17 bytes, more "
                                                         "than the queue's max_result_bytes (16)")
    # Retried per the queue's policy: due after the backoff, then it can complete.
    h.clock.advance(1)
    await h.sweeper.run_once()
    (again,) = await h.reserve()
    assert again.id == past.id and again.attempt == 2
    (done,) = await _settle(h, (again, b"small"))
    assert done.state == int(State.COMPLETED) and (await h.job(past.id)).result == b"small"


async def test_a_lowered_limit_applies_to_the_next_ack(make_harness: HarnessFactory) -> None:
    h = await make_harness(queues=QUEUES)
    await h.enqueue()
    (job,) = await h.reserve()
    await AdminEngine(h.parts, h.store.admin).update_queue(
        "q", {"limits": {"max_result_bytes": 4}}, ["limits.max_result_bytes"])
    req = wpb.AckRequest(job_id=job_id_text(job.id), lease_id=job_id_text(job.lease_id or b""),
                         result=pb.Payload(data=b"12345"))
    (refused,) = await h.engine.settle([settle_params(req, h.now, 16 * 1024)])
    assert refused.state == int(State.SCHEDULED)


async def test_the_worker_dead_letters_a_job_whose_result_json_cannot_encode(make_harness: HarnessFactory) -> None:
    h = await make_harness(queues=QUEUES)
    job_id, _ = await h.enqueue(max_attempts=5)
    (job,) = await h.reserve()
    (result,) = await _settle(h, (job, {"when": object()}))
    assert result.state == int(State.DEAD_LETTERED)  # at once: attempts were left
    back = await h.job(job_id)
    (entry,) = _history(back)
    assert entry["outcome"] == "dead_letter" and back.result is None
    assert entry["error_message"].startswith("ResultError: the handler's return value cannot be stored as the "
                                             "job's result: TypeError: Object of type object is not JSON "
                                             "serializable")
    assert "Traceback" in entry["error_detail"]


async def test_the_worker_fails_an_attempt_whose_result_is_over_the_limit_it_was_told(
        make_harness: HarnessFactory) -> None:
    h = await make_harness(queues=QUEUES)
    for _ in range(2):
        await h.enqueue()
    at, past = await h.reserve(n=2)
    ok, failed = await _settle(h, (at, b"y" * LIMIT), (past, b"y" * (LIMIT + 1)))
    assert (ok.state, failed.state) == (int(State.COMPLETED), int(State.SCHEDULED))
    assert _history(await h.job(past.id))[0]["error_message"] == (
        "ResultTooLarge: the handler's result is 17 bytes, more than the queue's max_result_bytes (16); the "
        "attempt failed and is retried per the queue's policy")


async def test_the_result_goes_with_the_job_at_the_completed_retention(make_harness: HarnessFactory) -> None:
    h = await make_harness(queues=QUEUES)
    job_id, _ = await h.enqueue()
    (job,) = await h.reserve()
    await _settle(h, (job, {"kept": 1}))
    finished = h.now
    h.clock.set(finished + 60 * S - 1)
    await h.sweeper.run_once()
    assert (await h.job(job_id)).result == b'{"kept":1}'
    h.clock.set(finished + 60 * S)
    assert (await h.sweeper.run_once())["prune"].count == 1
    assert await h.store.get_job(job_id) is None


def test_an_ack_with_a_result_label_no_store_can_hold_is_refused_whole() -> None:
    job_id, lease_id = "00000000-0000-7000-8000-000000000000", "11111111-1111-4111-8111-111111111111"

    def ack(encoding: str | None) -> wpb.AckRequest:
        req = wpb.AckRequest(job_id=job_id, lease_id=lease_id)
        if encoding is not None:
            req.result.CopyFrom(pb.Payload(data=b"x", encoding=encoding))
        return req

    assert settle_params(ack("e" * 128), 0, 1024).result_encoding == "e" * 128
    for encoding, why in (("e" * 129, "max_encoding_bytes (128)"), ("a\x00b", "NUL")):
        with pytest.raises(InvalidRequest) as info:
            settle_params(ack(encoding), 0, 1024)
        assert info.value.field == "result.encoding" and why in str(info.value)
    bare = settle_params(ack(None), 0, 1024)
    assert (bare.result, bare.result_encoding) == (None, "")
