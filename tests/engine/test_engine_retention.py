"""Retention and the dedup window through the real engine and sweeper with a fake clock
(SPEC §3, §6): finished jobs are deleted by the prune pass at exactly their queue's
retention, idempotency keys dedup until the end of the window and not a µs longer.
"""

from __future__ import annotations

from engine.engine_kit import HarnessFactory, S
from sepp.api.v1 import common_pb2 as pb
from sepp.domain.ids import job_id_text
from sepp.domain.states import State


async def test_completed_and_dead_lettered_jobs_are_pruned_at_their_retention(make_harness: HarnessFactory) -> None:
    h = await make_harness(queues={"q": {"completed_retention": 60.0, "dead_letter_retention": 120.0}})
    done, _ = await h.enqueue()
    dead, _ = await h.enqueue()
    kept, _ = await h.enqueue()
    first, second = await h.reserve(n=2)
    await h.ack(first)
    await h.nack(second, dead_letter="no")
    finished = h.now
    h.clock.set(finished + 60 * S - 1)
    assert (await h.sweeper.run_once())["prune"].count == 0
    h.clock.set(finished + 60 * S)
    assert (await h.sweeper.run_once())["prune"].count == 1
    assert await h.store.get_job(done) is None
    h.clock.set(finished + 120 * S - 1)
    assert (await h.sweeper.run_once())["prune"].count == 0
    h.clock.set(finished + 120 * S)
    assert (await h.sweeper.run_once())["prune"].count == 1
    assert await h.store.get_job(dead) is None
    h.clock.advance(365 * 86400)
    await h.sweeper.run_once()
    assert (await h.job(kept)).state == State.READY  # unfinished jobs are never pruned


async def test_a_key_dedups_until_the_end_of_its_window(make_harness: HarnessFactory) -> None:
    h = await make_harness(queues={"q": {"dedup_window": 10.0}})
    start = h.now
    original, dup = await h.enqueue(key="k")
    assert not dup
    h.clock.set(start + 10 * S - 1)
    assert await h.enqueue(key="k") == (original, True)
    # The window is anchored at the original enqueue, not moved by the duplicates.
    h.clock.set(start + 10 * S)
    fresh, dup = await h.enqueue(key="k")
    assert not dup and fresh != original
    assert await h.enqueue(key="k") == (fresh, True)
    # Both jobs are there; the second owns the key until its own window ends.
    assert {(await h.job(original)).state, (await h.job(fresh)).state} == {int(State.READY)}


async def test_a_batch_dedups_within_itself_and_against_stored_keys(make_harness: HarnessFactory) -> None:
    h = await make_harness(queues={"q": {"dedup_window": 5.0}})
    stored, _ = await h.enqueue(key="old")
    reqs = [pb.EnqueueRequest(queue="q", job_type="t", idempotency_key=k) for k in ("new", "new", "old", "")]
    out = await h.engine.enqueue_batch(reqs)
    acks = [o for o in out if isinstance(o, tuple)]
    assert len(acks) == 4  # no rejection
    (new_id, new_dup), (again_id, again_dup), (old_id, old_dup), (_, plain_dup) = acks
    assert (new_dup, again_id, again_dup) == (False, new_id, True)
    assert (old_id, old_dup, plain_dup) == (job_id_text(stored), True, False)
    h.clock.advance(5)
    await h.sweeper.run_once()  # the prune pass drops the expired keys
    assert await h.store.admin.find_idempotency("q", "old") is None
    assert (await h.enqueue(key="old"))[1] is False
