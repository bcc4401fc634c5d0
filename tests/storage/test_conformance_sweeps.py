"""Conformance: the sweeps — ``promote_due``, ``next_due``, ``reclaim_expired`` (READY again,
LEASE_EXPIRED on the last attempt, cancel requested), ``prune`` (retentions, expired keys,
``limit``) — and ``reserve_damaged`` (SPEC §3).
"""

from __future__ import annotations

import json

from sepp.domain.params import DAMAGED_ROW, SettleKind, SettleParams
from sepp.domain.policy import PolicyTable, QueuePolicy
from sepp.domain.records import JobRecord
from sepp.domain.states import State
from sepp.storage.admin import JobQuery
from sepp.storage.base import Store
from storage.conformance_kit import LEASE, NOW, POLICY, S, get, lease, put, row, settle1

SCHEDULED = State.SCHEDULED


async def test_promote_due_moves_jobs_due_at_or_before_now_earliest_first_up_to_limit(
        store: Store) -> None:
    rows = [row("a", state=SCHEDULED, run_at=NOW + 3), row("b", state=SCHEDULED, run_at=NOW + 1),
            row("c", state=SCHEDULED, run_at=NOW + 2), row("d", state=SCHEDULED, run_at=NOW + 9)]
    await put(store, *rows)
    nothing = await store.promote_due(NOW, 100)
    assert (nothing.count, nothing.queues, nothing.skipped) == (0, frozenset(), ())
    two = await store.promote_due(NOW + 3, 2)
    assert (two.count, two.queues) == (2, frozenset({"b", "c"}))
    assert [(await get(store, r.id)).state for r in rows] == [SCHEDULED, State.READY, State.READY, SCHEDULED]
    rest = await store.promote_due(NOW + 3, 100)
    assert (rest.count, rest.queues) == (1, frozenset({"a"}))
    assert (await get(store, rows[0].id)).run_at == NOW + 3  # run_at kept


async def test_next_due_is_the_earliest_scheduled_run_at(store: Store) -> None:
    assert await store.next_due() is None
    await put(store, row(state=SCHEDULED, run_at=NOW + 7), row(state=SCHEDULED, run_at=NOW + 4), row())
    assert await store.next_due() == NOW + 4
    await store.promote_due(NOW + 4, 100)
    assert await store.next_due() == NOW + 7
    await store.promote_due(NOW + 7, 100)
    assert await store.next_due() is None


async def test_an_expired_lease_goes_back_to_ready_with_a_history_entry(store: Store) -> None:
    await put(store, row(max_attempts=2))
    (rec,) = await lease(store)
    assert (await store.reclaim_expired(NOW + LEASE - 1, 100, POLICY)).count == 0
    result = await store.reclaim_expired(NOW + LEASE, 100, POLICY)  # expiry ≤ now
    assert (result.count, result.queues, result.dead_lettered) == (1, frozenset({"q"}), {})
    back = await get(store, rec.id)
    assert (back.state, back.attempt) == (int(State.READY), 1)
    (entry,) = json.loads(back.history or "[]")
    assert (entry["attempt"], entry["outcome"], entry["started_at"], entry["ended_at"]) == (
        1, "lease_expired", NOW, NOW + LEASE)
    (again,) = await lease(store, now=NOW + LEASE + 1)
    assert again.attempt == 2


async def test_an_expired_lease_on_the_last_attempt_is_dead_lettered_lease_expired(store: Store) -> None:
    await put(store, row(max_attempts=1), row("other", max_attempts=1))
    (rec,) = await lease(store)
    (other,) = await lease(store, "other")
    result = await store.reclaim_expired(NOW + LEASE + 5, 100, POLICY)
    assert (result.count, result.queues, result.dead_lettered) == (2, frozenset(), {"q": 1, "other": 1})
    dead = await get(store, rec.id)
    # finished when the pass saw it; run_at and the attempt's end are the lease's end.
    assert (dead.state, dead.reason, dead.finished_at, dead.run_at) == (
        int(State.DEAD_LETTERED), "LEASE_EXPIRED", NOW + LEASE + 5, NOW + LEASE)
    assert [(e["outcome"], e["ended_at"]) for e in json.loads(dead.history or "[]")] == [
        ("lease_expired", NOW + LEASE)]
    # Kept for the dead-letter retention from the pass's now.
    assert (await store.prune(NOW + LEASE + 5 + POLICY("q").dead_retention - 1, 100)).count == 0
    assert (await store.prune(NOW + LEASE + 5 + POLICY("q").dead_retention, 100)).count == 2
    assert other.id != rec.id


async def test_an_expired_lease_with_a_cancel_request_is_cancelled(store: Store) -> None:
    await put(store, row(max_attempts=5))
    (rec,) = await lease(store)
    await store.admin.cancel(rec.id, NOW + 1, POLICY, "")
    result = await store.reclaim_expired(NOW + LEASE, 100, POLICY)
    assert (result.count, result.queues, result.dead_lettered) == (1, frozenset(), {})
    assert (await get(store, rec.id)).state == State.CANCELLED


async def test_reclaim_takes_the_oldest_expiries_first_up_to_limit(store: Store) -> None:
    await put(store, row(), row(), row())
    first = await lease(store, lease_us=3 * S)
    second = await lease(store, lease_us=1 * S)
    third = await lease(store, lease_us=2 * S)
    result = await store.reclaim_expired(NOW + 10 * S, 2, POLICY)
    assert result.count == 2
    states = [(await get(store, r[0].id)).state for r in (first, second, third)]
    assert states == [State.RESERVED, State.READY, State.READY]


async def test_reclaim_takes_the_oldest_expiries_across_every_queue(store: Store) -> None:
    """The expired leases of every queue, oldest first whichever queue holds them (the index
    of the RESERVED jobs is ordered by queue first: migrations 0008 / 0010), a queue whose
    leases are all live left alone, and a pass cut by its limit goes on at the next."""
    expiry = {"c": [4, 1, 7], "a": [6, 2], "b": [3, 9], "live": [50], "z": [5, 8]}
    held: dict[bytes, tuple[str, int]] = {}
    for queue, seconds in expiry.items():
        await put(store, *(row(queue) for _ in seconds))
        for s in seconds:
            (rec,) = await lease(store, queue, lease_us=s * S)
            held[rec.id] = (queue, s)

    async def reclaimed(now: int, limit: int) -> list[tuple[str, int]]:
        before = {i for i in held if (await get(store, i)).state == State.RESERVED}
        result = await store.reclaim_expired(now, limit, POLICY)
        after = {i for i in held if (await get(store, i)).state == State.RESERVED}
        assert result.count == len(before - after)
        return sorted(held[i] for i in before - after)

    assert await reclaimed(NOW + 1 * S - 1, 100) == []
    assert sorted(s for _, s in await reclaimed(NOW + 20 * S, 4)) == [1, 2, 3, 4]
    assert await reclaimed(NOW + 20 * S, 3) == [("a", 6), ("c", 7), ("z", 5)]
    assert await reclaimed(NOW + 20 * S, 100) == [("b", 9), ("z", 8)]
    assert await reclaimed(NOW + 20 * S, 100) == []
    assert [held[i] for i in held if (await get(store, i)).state == State.RESERVED] == [("live", 50)]


async def test_prune_deletes_finished_jobs_at_their_retention_and_nothing_else(store: Store) -> None:
    policy = PolicyTable(QueuePolicy(completed_retention=10, dead_retention=20))
    rows = [row(), row(), row(), row(), row(state=SCHEDULED, run_at=NOW + 1)]
    await put(store, *rows)
    acked, dead, cancelled, reserved = await lease(store, n=4)
    await settle1(store, acked, SettleKind.ACK, NOW, policy=policy)
    await settle1(store, dead, SettleKind.DEAD_LETTER, NOW, policy=policy, reason="X")
    await settle1(store, cancelled, SettleKind.RELEASE, NOW, policy=policy)
    await store.admin.cancel(cancelled.id, NOW, policy, "")
    assert (await store.prune(NOW + 9, 100)).count == 0
    assert (await store.prune(NOW + 10, 100)).count == 1
    assert await store.get_job(acked.id) is None
    assert (await store.prune(NOW + 20, 100)).count == 2  # dead-lettered and cancelled
    assert (await store.prune(NOW + 10**6 * S, 100)).count == 0
    assert [(await get(store, r.id)).state for r in (rows[3], rows[4])] == [State.RESERVED, SCHEDULED]
    assert reserved.id == rows[3].id


async def test_prune_deletes_expired_keys_and_keeps_live_ones(store: Store) -> None:
    a, b, c = row(key="a"), row(key="b"), row(key="c")
    await put(store, a, b, c, until=[NOW + 5, NOW + 6, NOW + 7])
    result = await store.prune(NOW + 6, 100)
    assert result.count == 2
    assert [await store.admin.find_idempotency("q", k) for k in "abc"] == [None, None, (c.id, NOW + 7)]
    assert (await get(store, a.id)).state == State.READY  # the job stays
    fresh = row(key="a")
    assert await put(store, fresh, now=NOW + 6) == {}


async def test_prune_limit_applies_to_jobs_and_to_keys_each(store: Store) -> None:
    policy = PolicyTable(QueuePolicy(completed_retention=0))
    rows = [row(key=f"k{i}") for i in range(3)]
    await put(store, *rows, until=[NOW + 1] * 3)
    recs = await lease(store, n=3)
    await store.settle([_ack(r) for r in recs], policy)
    assert (await store.prune(NOW + 1, 2)).count == 4  # 2 jobs + 2 keys
    assert (await store.prune(NOW + 1, 2)).count == 2
    assert (await store.prune(NOW + 1, 2)).count == 0


async def test_reserve_damaged_dead_letters_held_jobs_and_keeps_them(store: Store) -> None:
    await put(store, row(), row(), row())
    held = await lease(store, n=3)
    n = await store.reserve_damaged([(held[0].id, held[0].lease_id or b""), (held[1].id, b"\x07" * 16),
                                     (b"\x08" * 16, b"\x08" * 16)], NOW + 1)
    assert n == 1
    dead = await get(store, held[0].id)
    assert (dead.state, dead.reason, dead.finished_at, dead.history) == (
        int(State.DEAD_LETTERED), DAMAGED_ROW, NOW + 1, None)
    assert (await get(store, held[1].id)).state == State.RESERVED
    assert (await store.prune(NOW + 10**9 * S, 100)).count == 0  # no purge time
    assert (await get(store, held[0].id)).state == State.DEAD_LETTERED


def _ack(rec: JobRecord) -> SettleParams:
    return SettleParams(rec.id, rec.lease_id or b"", SettleKind.ACK, NOW)


async def test_the_history_entries_of_a_nack_and_a_lease_expiry_name_the_node_that_leased_the_job(
        store: Store) -> None:
    # Attempt history names the node (ReserveParams.node → the job's node column)
    await put(store, row(max_attempts=5))
    (rec,) = await lease(store, node="node-a")
    assert rec.node == "node-a" and (await get(store, rec.id)).node == "node-a"
    await settle1(store, rec, SettleKind.RETRY, NOW + 1, delay=0, error_message="boom")
    (rec,) = await lease(store, now=NOW + 2, node="node-b")
    await store.reclaim_expired(NOW + 2 + LEASE, 100, POLICY)
    (rec,) = await lease(store, now=NOW + 3 + LEASE, node="node-c")
    await settle1(store, rec, SettleKind.ACK, NOW + 4 + LEASE)
    done = await get(store, rec.id)
    assert [(e["attempt"], e["outcome"], e["node"]) for e in done.attempt_entries()] == [
        (1, "retry", "node-a"), (2, "lease_expired", "node-b"), (3, "completed", "node-c")]
    assert [e["node"] for e in json.loads(done.history or "[]")] == ["node-a", "node-b"]
    (summary,) = (await store.admin.list_jobs(JobQuery(), None, 10)).jobs
    assert summary.record.node == "node-c"


async def test_a_job_leased_without_a_node_name_reads_as_an_empty_node(store: Store) -> None:
    await put(store, row(max_attempts=5))
    (rec,) = await lease(store)
    await settle1(store, rec, SettleKind.RELEASE, NOW + 1)
    (entry,) = (await get(store, rec.id)).attempt_entries()
    assert entry["node"] == ""
