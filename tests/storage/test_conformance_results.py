"""Conformance: a job's result (``SettleParams.result``) — written by the ack that completes
the job, in the same write (the one-job ack and the batched ack statement, with and without
results among its acks), read back by ``get_job``, refused over the queue's
``max_result_bytes`` (at the limit and one past it: the attempt fails instead and is retried
per the queue's policy, dead-lettered on the last attempt), left out by every other settle,
and deleted with the completed job by the prune at the completed retention.
"""

from __future__ import annotations

import json

from sepp.domain.params import SettleError, SettleKind, SettleParams
from sepp.domain.policy import PolicyTable, QueuePolicy
from sepp.domain.records import JobRecord
from sepp.domain.states import State
from sepp.domain.transitions import result_refused
from sepp.storage.base import Store
from storage.conformance_kit import NOW, POLICY, S, StoreFactory, get, lease, put, row

ACK, RETRY = SettleKind.ACK, SettleKind.RETRY
#: The suite's limit: 64-byte results in "q", 8 in "tight" (the smallest of the table).
LIMIT, TIGHT = 64, 8
LIMITS = PolicyTable(QueuePolicy(jitter=0.0, max_result_bytes=LIMIT),
                     {"tight": QueuePolicy(jitter=0.0, max_result_bytes=TIGHT)})


def _ack(rec: JobRecord, now: int = NOW + S, result: bytes | None = None, encoding: str = "") -> SettleParams:
    return SettleParams(rec.id, rec.lease_id or b"", ACK, now, outcome="completed", result=result,
                        result_encoding=encoding)


async def _leased(store: Store, n: int = 1, queue: str = "q", max_attempts: int = 3) -> list[JobRecord]:
    await put(store, *[row(queue, max_attempts=max_attempts) for _ in range(n)])
    return await lease(store, queue, n=n)


async def test_an_ack_stores_its_result_with_the_completion(store: Store) -> None:
    rec, = await _leased(store)
    (result,) = await store.settle([_ack(rec, result=b'{"ok":true}', encoding="application/json")], LIMITS)
    assert (result.error, result.state) == (None, int(State.COMPLETED))
    done = await get(store, rec.id)
    assert (done.state, done.result, done.result_encoding) == (int(State.COMPLETED), b'{"ok":true}',
                                                              "application/json")


async def test_no_result_reads_as_none_and_an_empty_one_as_empty_bytes(store: Store) -> None:
    plain, empty = await _leased(store, 2)
    await store.settle([_ack(plain)], LIMITS)
    await store.settle([_ack(empty, result=b"", encoding="application/octet-stream")], LIMITS)
    assert ((await get(store, plain.id)).result, (await get(store, plain.id)).result_encoding) == (None, None)
    stored = await get(store, empty.id)
    assert (stored.result, stored.result_encoding) == (b"", "application/octet-stream")


async def test_binary_results_come_back_byte_for_byte(store: Store) -> None:
    rec, = await _leased(store)
    data = bytes(range(256))[:LIMIT]
    await store.settle([_ack(rec, result=data, encoding="")], LIMITS)
    stored = await get(store, rec.id)
    assert (stored.result, stored.result_encoding) == (data, "")


async def test_a_result_at_the_limit_is_stored_and_one_past_it_fails_the_attempt(store: Store) -> None:
    at, past = await _leased(store, 2)
    items = [_ack(at, result=b"a" * LIMIT), _ack(past, result=b"b" * (LIMIT + 1))]
    ok, refused = await store.settle(items, LIMITS)
    assert (ok.error, ok.state) == (None, int(State.COMPLETED)) and not result_refused(items[0], ok)
    # Refused: retried per the queue's policy (backoff 1 s, no jitter), not completed.
    assert refused.error is None and result_refused(items[1], refused)
    assert (refused.state, refused.run_at, refused.attempt) == (int(State.SCHEDULED), NOW + 2 * S, 1)
    assert (await get(store, at.id)).result == b"a" * LIMIT
    job = await get(store, past.id)
    assert (job.state, job.result, job.result_encoding, job.finished_at) == (int(State.SCHEDULED), None, None, None)
    (entry,) = json.loads(job.history or "[]")
    assert entry["outcome"] == "retry" and entry["attempt"] == 1
    assert entry["error_message"] == ("ResultTooLarge: the handler's result is 65 bytes, more than the queue's "
                                      "max_result_bytes (64); the attempt failed and is retried per the queue's "
                                      "policy")


async def test_a_refused_result_on_the_last_attempt_dead_letters_the_job(store: Store) -> None:
    rec, = await _leased(store, max_attempts=1)
    (refused,) = await store.settle([_ack(rec, result=b"x" * (LIMIT + 1))], LIMITS)
    assert refused.state == int(State.DEAD_LETTERED)
    job = await get(store, rec.id)
    assert (job.state, job.reason, job.result) == (int(State.DEAD_LETTERED), "ATTEMPTS_EXHAUSTED", None)
    assert "ResultTooLarge" in json.loads(job.history or "[]")[0]["error_message"]


async def test_each_queue_judges_results_by_its_own_limit_in_a_batch(store: Store) -> None:
    # The batch's statement takes the acks whose results no queue refuses (≤ 8 bytes here);
    # the others are judged one by one, each by its own queue's limit.
    q1, q2 = await _leased(store, 2)
    t1, t2 = await _leased(store, 2, queue="tight")
    items = [_ack(q1, result=b"1" * LIMIT), _ack(q2, result=b"2" * TIGHT), _ack(t1, result=b"3" * TIGHT),
             _ack(t2, result=b"4" * (TIGHT + 1)), _ack(await _extra(store))]
    results = await store.settle(items, LIMITS)
    assert [r.error for r in results] == [None] * 5
    assert [result_refused(p, r) for p, r in zip(items, results, strict=True)] == [False, False, False, True, False]
    assert [(await get(store, p.job_id)).result for p in items] == [b"1" * LIMIT, b"2" * TIGHT, b"3" * TIGHT, None,
                                                                   None]
    assert (await get(store, t2.id)).state == int(State.SCHEDULED)


async def _extra(store: Store) -> JobRecord:
    rec, = await _leased(store)
    return rec


async def test_a_batch_mixing_acks_with_and_without_results_and_nacks_writes_each(store: Store) -> None:
    recs = await _leased(store, 5)
    items = [_ack(recs[0], result=b"r0", encoding="text/plain"), _ack(recs[1]),
             SettleParams(recs[2].id, recs[2].lease_id or b"", RETRY, NOW + S, delay=0, outcome="retry"),
             _ack(recs[3], result=b"r3", encoding="application/octet-stream"), _ack(recs[4])]
    results = await store.settle(items, LIMITS)
    assert [r.state for r in results] == [4, 4, 2, 4, 4]
    stored = [await get(store, r.id) for r in recs]
    assert [(s.result, s.result_encoding) for s in stored] == [
        (b"r0", "text/plain"), (None, None), (None, None), (b"r3", "application/octet-stream"), (None, None)]


async def test_a_batch_of_acks_all_without_results_stores_none(store: Store) -> None:
    recs = await _leased(store, 3)
    await store.settle([_ack(r) for r in recs], LIMITS)
    assert [((await get(store, r.id)).state, (await get(store, r.id)).result) for r in recs] == [(4, None)] * 3


async def test_results_with_any_lookup_are_judged_by_the_jobs_queue(store: Store) -> None:
    # A lookup that is not a PolicyTable says nothing of its queues' limits ahead: every ack
    # with a result is judged one by one.
    def policy(_queue: str) -> QueuePolicy:
        return QueuePolicy(jitter=0.0, max_result_bytes=4)

    recs = await _leased(store, 2)
    items = [_ack(recs[0], result=b"1234"), _ack(recs[1], result=b"12345")]
    results = await store.settle(items, policy)
    assert [r.state for r in results] == [int(State.COMPLETED), int(State.SCHEDULED)]


async def test_a_repeated_ack_keeps_the_first_result_and_a_stale_one_writes_nothing(store: Store) -> None:
    rec, = await _leased(store)
    await store.settle([_ack(rec, result=b"first")], LIMITS)
    (again,) = await store.settle([_ack(rec, NOW + 2 * S, result=b"second")], LIMITS)
    assert (again.error, again.state) == (None, int(State.COMPLETED))
    assert (await get(store, rec.id)).result == b"first"
    other, = await _leased(store)
    (stale,) = await store.settle([_ack(other, result=b"x")._replace(lease_id=b"\x07" * 16)], LIMITS)
    assert stale.error is SettleError.LEASE_MISMATCH
    assert ((await get(store, other.id)).state, (await get(store, other.id)).result) == (int(State.RESERVED), None)


async def test_a_nack_never_stores_a_result(store: Store) -> None:
    rec, = await _leased(store)
    await store.settle([SettleParams(rec.id, rec.lease_id or b"", RETRY, NOW + S, delay=0, outcome="retry")], POLICY)
    job = await get(store, rec.id)
    assert (job.state, job.result, job.result_encoding) == (int(State.READY), None, None)


async def test_the_result_is_kept_until_the_completed_retention_deletes_the_job(store: Store) -> None:
    policy = PolicyTable(QueuePolicy(completed_retention=10 * S, max_result_bytes=LIMIT))
    rec, = await _leased(store)
    await store.settle([_ack(rec, NOW, result=b"kept")], policy)
    assert (await store.prune(NOW + 10 * S - 1, 100)).count == 0
    assert (await get(store, rec.id)).result == b"kept"
    assert (await store.prune(NOW + 10 * S, 100)).count == 1
    assert await store.get_job(rec.id) is None


async def test_a_result_survives_a_reopen(store_factory: StoreFactory) -> None:
    store = await store_factory()
    rec, = await _leased(store)
    await store.settle([_ack(rec, result=b"durable", encoding="text/plain")], LIMITS)
    await store.close()
    again = await store_factory()  # the same data
    stored = await get(again, rec.id)
    assert (stored.result, stored.result_encoding) == (b"durable", "text/plain")
