"""Conformance: ``Store.settle`` and ``Store.extend`` — each settle kind (ack, retry with a
delay and with backoff, dead-letter at ``max_attempts``, explicit dead-letter, release),
lease fencing (wrong lease id, expired lease, unknown job), repeated acks, the batched-ack
path, and cancel-while-reserved (SPEC §1, §3, §6).
"""

from __future__ import annotations

import json

from sepp.domain.params import SettleError, SettleKind, SettleParams, SettleResult
from sepp.domain.policy import PolicyTable, QueuePolicy
from sepp.domain.records import JobRecord
from sepp.domain.states import State
from sepp.storage.base import Store
from storage.conformance_kit import (
    CANCELLED_WHILE_RESERVED,
    LEASE,
    NOW,
    POLICY,
    S,
    get,
    lease,
    put,
    row,
    settle1,
)

ACK, RETRY, DEAD, RELEASE = SettleKind.ACK, SettleKind.RETRY, SettleKind.DEAD_LETTER, SettleKind.RELEASE


async def _one(store: Store, queue: str = "q", max_attempts: int = 3) -> JobRecord:
    r = row(queue, max_attempts=max_attempts)
    await put(store, r)
    (rec,) = await lease(store, r.queue)
    return rec


def _history(rec: JobRecord) -> list[dict[str, object]]:
    return json.loads(rec.history) if rec.history else []


async def test_ack_completes_and_keeps_run_at_and_history(store: Store) -> None:
    rec = await _one(store)
    assert await settle1(store, rec, ACK, NOW + 5) == SettleResult(None, int(State.COMPLETED), NOW + 5, 1, "q", NOW,
                                                                   "t")
    done = await get(store, rec.id)
    assert (done.state, done.finished_at, done.run_at, done.attempt, done.reason) == (
        int(State.COMPLETED), NOW + 5, NOW, 1, None)
    assert [(e["attempt"], e["outcome"], e["worker_id"], e["started_at"], e["ended_at"])
            for e in done.attempt_entries()] == [(1, "completed", "w", NOW, NOW + 5)]


async def test_a_repeated_ack_by_the_completing_lease_succeeds_again(store: Store) -> None:
    rec = await _one(store)
    await settle1(store, rec, ACK, NOW + 1)
    # run_at 0 marks the repeat (not counted twice by the statistics).
    assert await settle1(store, rec, ACK, NOW + 2) == SettleResult(None, int(State.COMPLETED), 0, 1, "q")
    assert (await settle1(store, rec, RETRY, NOW + 3)).error is SettleError.LEASE_EXPIRED


async def test_fencing_wrong_lease_unknown_job_and_expiry_at_exactly_lease_end(store: Store) -> None:
    rec = await _one(store)
    end = NOW + LEASE
    assert (await settle1(store, rec, ACK, NOW + 1, lease_id=b"\x01" * 16)).error is SettleError.LEASE_MISMATCH
    ghost = rec._replace(id=b"\x02" * 16)
    assert (await settle1(store, ghost, ACK, NOW + 1)).error is SettleError.NOT_FOUND
    assert (await settle1(store, rec, RELEASE, end)).error is SettleError.LEASE_EXPIRED
    assert (await settle1(store, rec, ACK, end)).error is SettleError.LEASE_EXPIRED
    # A refused settle changes nothing; one µs before the end the lease still holds.
    assert (await get(store, rec.id)).state == State.RESERVED
    assert (await settle1(store, rec, ACK, end - 1)).error is None


async def test_the_wrong_lease_is_reported_before_expiry(store: Store) -> None:
    rec = await _one(store)
    late = NOW + LEASE + S
    assert (await settle1(store, rec, ACK, late, lease_id=b"\x03" * 16)).error is SettleError.LEASE_MISMATCH


async def test_an_old_lease_is_fenced_off_after_redelivery(store: Store) -> None:
    rec = await _one(store)
    await store.reclaim_expired(NOW + LEASE, 100, POLICY)
    (again,) = await lease(store, now=NOW + LEASE + 1)
    assert again.attempt == 2 and again.lease_id != rec.lease_id
    assert (await settle1(store, rec, ACK, NOW + LEASE + 2)).error is SettleError.LEASE_MISMATCH
    assert (await settle1(store, again, ACK, NOW + LEASE + 2)).error is None


async def test_retry_with_a_delay_schedules_it_and_records_the_attempt(store: Store) -> None:
    rec = await _one(store)
    got = await settle1(store, rec, RETRY, NOW + 10, delay=5 * S, outcome="failed", error_message="boom",
                        error_detail="trace")
    assert got == SettleResult(None, int(State.SCHEDULED), NOW + 10 + 5 * S, 1, "q", NOW, "t")
    after = await get(store, rec.id)
    assert (after.state, after.run_at, after.attempt, after.finished_at) == (
        int(State.SCHEDULED), NOW + 10 + 5 * S, 1, None)
    assert _history(after) == [{"attempt": 1, "worker_id": "w", "node": "", "started_at": NOW, "ended_at": NOW + 10,
                                "outcome": "failed", "error_message": "boom", "error_detail": "trace"}]
    # Not reservable before run_at; at run_at it is, as attempt 2.
    assert await lease(store, now=NOW + 10 + 5 * S - 1) == []
    (second,) = await lease(store, now=NOW + 10 + 5 * S)
    assert second.attempt == 2


async def test_retry_with_delay_zero_is_ready_at_once_and_outcome_defaults_to_the_kind(
        store: Store) -> None:
    rec = await _one(store)
    assert await settle1(store, rec, RETRY, NOW + 1, delay=0) == SettleResult(None, int(State.READY), NOW + 1, 1, "q",
                                                                             NOW, "t")
    assert _history(await get(store, rec.id))[0]["outcome"] == "retry"


async def test_retry_without_a_delay_follows_the_queues_backoff(store: Store) -> None:
    policy = PolicyTable(QueuePolicy(jitter=0.0), {"b": QueuePolicy(backoff_base=3 * S, backoff_cap=10 * S,
                                                                    jitter=0.0)})
    rec = await _one(store, queue="b", max_attempts=10)
    now, expected = NOW, [3 * S, 6 * S, 10 * S, 10 * S]  # base × 2^(attempt−1), capped
    for attempt, delay in enumerate(expected, start=1):
        assert rec.attempt == attempt
        got = await settle1(store, rec, RETRY, now + 1, policy=policy)
        assert (got.state, got.run_at, got.attempt) == (int(State.SCHEDULED), now + 1 + delay, attempt)
        now = now + 1 + delay
        (rec,) = await lease(store, "b", now=now)


async def test_backoff_jitter_stays_within_its_bounds(store: Store) -> None:
    policy = PolicyTable(QueuePolicy(backoff_base=10 * S, jitter=0.5))
    rows = [row() for _ in range(20)]
    await put(store, *rows)
    recs = await lease(store, n=20)
    results = await store.settle([SettleParams(r.id, r.lease_id or b"", RETRY, NOW + 1) for r in recs], policy)
    delays = [r.run_at - (NOW + 1) for r in results]
    assert all(5 * S <= d <= 15 * S for d in delays), delays
    assert len(set(delays)) > 1  # jittered, not one fixed value


async def test_retry_on_the_last_attempt_dead_letters_with_attempts_exhausted(store: Store) -> None:
    rec = await _one(store, max_attempts=1)
    got = await settle1(store, rec, RETRY, NOW + 7, delay=S, error_message="no")
    assert got == SettleResult(None, int(State.DEAD_LETTERED), NOW + 7, 1, "q", NOW, "t")
    dead = await get(store, rec.id)
    assert (dead.state, dead.reason, dead.finished_at) == (int(State.DEAD_LETTERED), "ATTEMPTS_EXHAUSTED", NOW + 7)
    assert [(e["outcome"], e["error_message"]) for e in _history(dead)] == [("attempts_exhausted", "no")]
    assert await lease(store, now=NOW + 10 * S) == []


async def test_dead_letter_records_its_reason_whatever_the_attempts_left(store: Store) -> None:
    rec = await _one(store, max_attempts=5)
    got = await settle1(store, rec, DEAD, NOW + 3, reason="BAD_PAYLOAD", outcome="dead_letter")
    assert got == SettleResult(None, int(State.DEAD_LETTERED), NOW + 3, 1, "q", NOW, "t")
    dead = await get(store, rec.id)
    assert (dead.reason, dead.finished_at, _history(dead)[0]["outcome"]) == ("BAD_PAYLOAD", NOW + 3, "dead_letter")


async def test_release_gives_the_attempt_back_and_keeps_the_place(store: Store) -> None:
    first, second = row(), row()
    await put(store, first, second)
    (rec,) = await lease(store)
    assert rec.id == first.id
    got = await settle1(store, rec, RELEASE, NOW + 4, outcome="released", error_message="shutting down")
    assert got == SettleResult(None, int(State.READY), NOW, 0, "q", NOW, "t")
    back = await get(store, rec.id)
    assert (back.state, back.run_at, back.attempt) == (int(State.READY), NOW, 0)
    assert _history(back)[0]["outcome"] == "released"
    (again,) = await lease(store, now=NOW + 5)
    assert (again.id, again.attempt) == (first.id, 1)


async def test_a_cancel_requested_while_reserved_stops_a_retry_or_release_but_not_an_ack(
        store: Store) -> None:
    retried, released, acked = row(), row(), row()
    await put(store, retried, released, acked)
    recs = {r.id: r for r in await lease(store, n=3)}
    for job in (retried, released, acked):
        await store.admin.cancel(job.id, NOW + 1, POLICY, "")
    got = await settle1(store, recs[retried.id], RETRY, NOW + 2, delay=S)
    assert (got.state, got.run_at) == (int(State.CANCELLED), NOW + 2 + S)
    assert (await get(store, retried.id)).reason == CANCELLED_WHILE_RESERVED
    assert (await settle1(store, recs[released.id], RELEASE, NOW + 2)).state == State.CANCELLED
    assert (await settle1(store, recs[acked.id], ACK, NOW + 2)).state == State.COMPLETED


async def test_a_batch_of_acks_is_answered_in_order_with_refusals_in_place(store: Store) -> None:
    rows = [row() for _ in range(4)]
    await put(store, *rows)
    recs = await lease(store, n=4)
    items = [SettleParams(recs[0].id, recs[0].lease_id or b"", ACK, NOW + 1),
             SettleParams(b"\x09" * 16, b"\x09" * 16, ACK, NOW + 1),
             SettleParams(recs[1].id, b"\x08" * 16, ACK, NOW + 1),
             SettleParams(recs[2].id, recs[2].lease_id or b"", RETRY, NOW + 1, delay=0),
             SettleParams(recs[3].id, recs[3].lease_id or b"", ACK, NOW + 1)]
    results = await store.settle(items, POLICY)
    assert [r.error for r in results] == [None, SettleError.NOT_FOUND, SettleError.LEASE_MISMATCH, None, None]
    assert [r.state for r in results] == [4, 0, 0, 2, 4]
    assert [(await get(store, r.id)).state for r in recs] == [4, 3, 2, 4]


async def test_the_same_job_twice_in_one_call_is_applied_in_order(store: Store) -> None:
    rec = await _one(store)
    items = [SettleParams(rec.id, rec.lease_id or b"", ACK, NOW + 1)] * 2
    assert [(r.error, r.state, r.run_at) for r in await store.settle(items, POLICY)] == [
        (None, 4, NOW + 1), (None, 4, 0)]


async def test_acks_in_a_batch_use_each_queues_retention(store: Store) -> None:
    policy = PolicyTable(QueuePolicy(completed_retention=100), {"short": QueuePolicy(completed_retention=10)})
    rows = [row("short"), row("short"), row("long"), row("long")]
    await put(store, *rows)
    recs = await lease(store, "short", "long", n=4)
    await store.settle([SettleParams(r.id, r.lease_id or b"", ACK, NOW) for r in recs], policy)
    assert (await store.prune(NOW + 9, 100)).count == 0
    assert (await store.prune(NOW + 10, 100)).count == 2
    assert [await store.get_job(r.id) is None for r in rows] == [True, True, False, False]
    assert (await store.prune(NOW + 100, 100)).count == 2


async def test_extend_moves_a_live_lease(store: Store) -> None:
    rec = await _one(store)
    lid = rec.lease_id or b""
    got = await store.extend(rec.id, lid, NOW + 1, NOW + 100 * S)
    assert (got.error, got.lease_expires_at, got.cancel_requested) == (None, NOW + 100 * S, False)
    assert (await get(store, rec.id)).lease_expires_at == NOW + 100 * S
    # The old expiry no longer ends the lease.
    assert (await store.reclaim_expired(NOW + LEASE, 100, POLICY)).count == 0
    assert (await settle1(store, rec, ACK, NOW + LEASE)).error is None


async def test_extend_refusals(store: Store) -> None:
    rec = await _one(store)
    lid = rec.lease_id or b""
    assert (await store.extend(rec.id, b"\x05" * 16, NOW + 1, NOW + S)).error is SettleError.LEASE_MISMATCH
    assert (await store.extend(b"\x06" * 16, lid, NOW + 1, NOW + S)).error is SettleError.NOT_FOUND
    assert (await store.extend(rec.id, lid, NOW + LEASE, NOW + LEASE + S)).error is SettleError.LEASE_EXPIRED
    assert (await get(store, rec.id)).lease_expires_at == NOW + LEASE
    await store.admin.cancel(rec.id, NOW + 1, POLICY, "")
    flagged = await store.extend(rec.id, lid, NOW + 2, NOW + 2 * LEASE)
    assert (flagged.error, flagged.cancel_requested) == (None, True)
    await settle1(store, rec, ACK, NOW + 3)
    assert (await store.extend(rec.id, lid, NOW + 4, NOW + LEASE)).error is SettleError.LEASE_EXPIRED
