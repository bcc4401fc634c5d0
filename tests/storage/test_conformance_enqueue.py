"""Conformance: ``Store.enqueue`` — rows stored as given, idempotency keys within and across
calls, the dedup window's edge, new queues in the same commit (SPEC §2, §6).

Runs against every backend of ``conftest.BACKENDS``.
"""

from __future__ import annotations

from sepp.domain.params import SettleKind
from sepp.domain.records import QueueRecord
from sepp.domain.states import State
from sepp.storage.base import Store
from storage.conformance_kit import NOW, POLICY, S, StoreFactory, get, lease, put, row, settle1


async def test_every_field_of_a_single_and_a_batched_row_reads_back(store: Store) -> None:
    one = row("a", priority=7, run_at=NOW, payload=b"\x00\xff", encoding="application/json", extras=b"\x08\x01")
    batch = [row("b", state=State.SCHEDULED, run_at=NOW + 5 * S, max_attempts=9, job_type=f"t{i}",
                 enqueued_at=NOW - 1) for i in range(3)]
    assert await put(store, one) == {}
    assert await put(store, *batch) == {}
    for r in [one, *batch]:
        rec = await get(store, r.id)
        assert (rec.id, rec.queue, rec.job_type, rec.state, rec.priority, rec.run_at, rec.enqueued_at,
                rec.max_attempts, rec.payload, rec.encoding, rec.extras, rec.idempotency_key) == tuple(r)
        assert (rec.attempt, rec.lease_id, rec.finished_at, rec.reason, rec.history) == (0, None, None, None, None)
        assert not rec.cancel_requested
    assert await store.get_job(b"\x00" * 16) is None
    assert store.backlog == 0


async def test_a_key_repeated_in_one_call_stores_the_first_row_only(store: Store) -> None:
    first, again, other = row(key="k"), row(key="k"), row(key="other")
    sched = row(key="s", state=State.SCHEDULED, run_at=NOW + S)
    dedups = await put(store, first, again, other, sched, row(key="s"))
    # The original's state is the state it was stored with (it is not in the table yet).
    assert dedups == {1: (first.id, int(State.READY)), 4: (sched.id, int(State.SCHEDULED))}
    assert await store.get_job(again.id) is None
    assert (await get(store, other.id)).idempotency_key == "other"


async def test_a_key_already_claimed_by_an_earlier_call_dedups_to_the_original_in_its_current_state(
        store: Store) -> None:
    first = row(key="k")
    assert await put(store, first) == {}
    (held,) = await lease(store)
    single, batched = row(key="k"), row(key="k")
    assert await put(store, single) == {0: (first.id, int(State.RESERVED))}
    assert await put(store, row(), batched) == {1: (first.id, int(State.RESERVED))}
    await settle1(store, held, SettleKind.ACK, NOW + 1)
    assert await put(store, row(key="k"), now=NOW + 2) == {0: (first.id, int(State.COMPLETED))}
    assert await store.get_job(single.id) is None and await store.get_job(batched.id) is None


async def test_keys_are_per_queue(store: Store) -> None:
    a, b = row("a", key="k"), row("b", key="k")
    assert await put(store, a, b) == {}
    assert (await get(store, b.id)).queue == "b"
    assert await store.admin.find_idempotency("a", "k") == (a.id, NOW + 3600 * S)
    assert await store.admin.find_idempotency("b", "k") == (b.id, NOW + 3600 * S)
    assert await store.admin.find_idempotency("c", "k") is None


async def test_the_window_ends_at_dedup_until_exactly(store: Store) -> None:
    first = row(key="k")
    await put(store, first, until=[NOW + 10])
    just_before = row(key="k")
    assert await put(store, just_before, until=[NOW + 99], now=NOW + 9) == {0: (first.id, int(State.READY))}
    # At dedup_until the claim has expired: the row is stored and claims the key anew.
    at_end = row(key="k")
    assert await put(store, at_end, until=[NOW + 50], now=NOW + 10) == {}
    assert await store.admin.find_idempotency("q", "k") == (at_end.id, NOW + 50)
    assert await put(store, row(key="k"), now=NOW + 49) == {0: (at_end.id, int(State.READY))}
    # The same in a batch.
    late = row(key="k")
    assert await put(store, row(), late, until=[0, NOW + 60], now=NOW + 50) == {}
    assert await store.admin.find_idempotency("q", "k") == (late.id, NOW + 60)


async def test_an_expired_key_is_still_found_until_pruned(store: Store) -> None:
    first = row(key="k")
    await put(store, first, until=[NOW + 10])
    assert await store.admin.find_idempotency("q", "k") == (first.id, NOW + 10)  # expired or not
    await store.prune(NOW + 10, 100)
    assert await store.admin.find_idempotency("q", "k") is None


async def test_a_deduplicated_original_that_was_pruned_reports_state_zero(store: Store) -> None:
    first = row(key="k")
    await put(store, first, until=[NOW + 2 * POLICY("q").completed_retention])
    (held,) = await lease(store)
    await settle1(store, held, SettleKind.ACK, NOW + 1)
    retention = POLICY("q").completed_retention
    await store.prune(NOW + 1 + retention, 100)
    assert await store.get_job(first.id) is None
    # The key outlives its job: a repeat still dedups, to an original that no longer exists.
    assert await put(store, row(key="k"), now=NOW + 2 + retention) == {0: (first.id, 0)}


async def test_new_queues_are_created_in_the_same_commit_and_never_overwrite(store: Store) -> None:
    declared = QueueRecord("kept", '{"default_priority": 9}', True, True)
    await store.upsert_queue(declared, NOW)
    fresh = QueueRecord("fresh", "{}", False, False)
    stale = QueueRecord("kept", "{}", False, False)
    await put(store, row("fresh"), row("kept"), new_queues=[fresh, stale])
    assert await store.load_queues() == [fresh, declared]
    # A keyed single row and a plain single row take other write paths: the same holds.
    other = QueueRecord("other", "{}", False, False)
    await put(store, row("other", key="k"), new_queues=[other])
    await put(store, row("third"), new_queues=[QueueRecord("third", "{}", False, False)])
    assert [q.name for q in await store.load_queues()] == ["fresh", "kept", "other", "third"]


async def test_everything_committed_is_there_after_close_and_reopen(store: Store,
                                                                   store_factory: StoreFactory) -> None:
    rows = [row(key=f"k{i}") for i in range(3)]
    await put(store, *rows)
    await put(store, row("solo"))
    await store.upsert_queue(QueueRecord("q", "{}", False, True), NOW)
    await store.close()
    again = await store_factory()
    assert [(await get(again, r.id)).state for r in rows] == [int(State.READY)] * 3
    assert await put(again, row(key="k0"), now=NOW + 1) == {0: (rows[0].id, int(State.READY))}
    assert [q.name for q in await again.load_queues()] == ["q"]
