"""Lease expiry through the real engine and sweeper with a fake clock (SPEC §3, §6): the
lease ends at exactly reserve time + lease, the reclaim pass puts the job back for a
redelivery whose lease fences the old one off, the last attempt's expiry dead-letters it
(LEASE_EXPIRED), and an extension moves the end — without sleeping.
"""

from __future__ import annotations

import asyncio
import contextlib
import json

import pytest

from engine.engine_kit import Harness, HarnessFactory, S
from sepp.domain.params import SettleError
from sepp.domain.states import State
from sepp.server.errors import LeaseRefused


async def test_an_expired_lease_is_reclaimed_and_redelivered_with_a_new_lease(harness: Harness) -> None:
    h = harness
    job_id, _ = await h.enqueue(max_attempts=3)
    start = h.now
    (first,) = await h.reserve(lease_s=5.0)
    assert first.lease_expires_at == start + 5 * S
    h.clock.advance(us=5 * S - 1)
    assert (await h.sweeper.run_once())["reclaim"].count == 0
    assert (await h.job(job_id)).state == State.RESERVED
    h.clock.advance(us=1)
    # At the end of the lease the ack is refused already, before any sweep ran.
    with pytest.raises(LeaseRefused) as refused:
        await h.ack(first)
    assert refused.value.error is SettleError.LEASE_EXPIRED
    reclaim = (await h.sweeper.run_once())["reclaim"]
    assert (reclaim.count, reclaim.queues, reclaim.dead_lettered) == (1, frozenset({"q"}), {})
    back = await h.job(job_id)
    assert (back.state, back.attempt) == (int(State.READY), 1)
    assert [(e["outcome"], e["ended_at"]) for e in json.loads(back.history or "[]")] == [
        ("lease_expired", start + 5 * S)]
    h.clock.advance(1)
    (second,) = await h.reserve(lease_s=5.0)
    assert (second.id, second.attempt, second.lease_expires_at) == (job_id, 2, h.now + 5 * S)
    assert second.lease_id != first.lease_id
    with pytest.raises(LeaseRefused) as stale:
        await h.ack(first)
    assert stale.value.error is SettleError.LEASE_MISMATCH
    assert (await h.ack(second)).state == State.COMPLETED


async def test_the_last_attempts_expiry_dead_letters_with_lease_expired(harness: Harness) -> None:
    h = harness
    finished: list[tuple[str, int, int]] = []
    h.parts.events.finished.subscribe(lambda queue, state, count: finished.append((queue, state, count)))
    job_id, _ = await h.enqueue(max_attempts=2)
    for attempt in (1, 2):
        (job,) = await h.reserve(lease_s=10.0)
        assert job.attempt == attempt
        h.clock.advance(10)
        await h.sweeper.run_once()
    dead = await h.job(job_id)
    assert (dead.state, dead.reason, dead.finished_at) == (int(State.DEAD_LETTERED), "LEASE_EXPIRED", h.now)
    assert [e["outcome"] for e in json.loads(dead.history or "[]")] == ["lease_expired"] * 2
    assert finished == [("q", int(State.DEAD_LETTERED), 1)]
    assert await h.reserve() == []


async def test_the_queues_lease_duration_applies_when_reserve_gives_none(make_harness: HarnessFactory) -> None:
    h = await make_harness(queues={"q": {"lease_duration": 7.5}})
    await h.enqueue()
    (job,) = await h.reserve()
    assert job.lease_expires_at == h.now + 7_500_000


async def test_an_extension_moves_the_end_of_the_lease(harness: Harness) -> None:
    h = harness
    job_id, _ = await h.enqueue()
    (job,) = await h.reserve(lease_s=5.0)
    h.clock.advance(4)
    extended = await h.engine.extend(job.id, job.lease_id or b"", 10.0)
    assert extended.lease_expires_at == h.now + 10 * S
    h.clock.advance(9)  # 13 s after the reserve: past the original end, before the new one
    assert (await h.sweeper.run_once())["reclaim"].count == 0
    assert (await h.ack(job)).state == State.COMPLETED
    with pytest.raises(LeaseRefused):
        await h.engine.extend(job.id, job.lease_id or b"", 10.0)
    assert (await h.job(job_id)).state == State.COMPLETED


async def test_a_reserve_whose_caller_gave_up_while_leasing_gives_the_jobs_back(harness: Harness) -> None:
    h = harness
    job_id, _ = await h.enqueue()
    waiting = asyncio.create_task(h.engine.reserve(["q"], 1, None, 0.0, "w"))
    for _ in range(3):
        await asyncio.sleep(0)  # the engine has handed the reserve to the store
    waiting.cancel()            # the caller goes away (deadline, disconnect) meanwhile
    with contextlib.suppress(asyncio.CancelledError):
        await waiting
    await h.engine.quiesce()  # the lease, then its give-back (a release: attempt and place kept)
    rec = await h.job(job_id)
    assert (rec.state, rec.attempt) == (int(State.READY), 0)
    assert [e["outcome"] for e in json.loads(rec.history or "[]")] == ["released"]
    (job,) = await h.reserve()
    assert (job.id, job.attempt) == (job_id, 1)


async def test_the_engine_leases_as_its_node_and_the_history_names_it(make_harness: HarnessFactory) -> None:
    # Attempt history names the node — node_name, else the host name
    import socket

    h = await make_harness(node_name="node-e")
    assert h.parts.node == "node-e"
    job_id, _ = await h.enqueue(max_attempts=3)
    (first,) = await h.reserve(lease_s=5.0)
    assert first.node == "node-e" and (await h.job(job_id)).node == "node-e"
    h.clock.advance(us=5 * S)
    await h.sweeper.run_once()  # the lease expired: reclaimed
    (second,) = await h.reserve()
    await h.nack(second, retry_after_s=0, message="boom")
    (third,) = await h.reserve()
    await h.ack(third)
    assert [(e["outcome"], e["node"]) for e in (await h.job(job_id)).attempt_entries()] == [
        ("lease_expired", "node-e"), ("retry_after", "node-e"), ("completed", "node-e")]
    unnamed = await make_harness()
    assert unnamed.parts.node == socket.gethostname()
