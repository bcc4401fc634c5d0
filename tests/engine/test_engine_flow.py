"""Flow control through the engine (docs/flow-control.md): ``max_in_flight``
with 20 concurrent reservers, ``rate_limit`` over 5 fake-clock seconds, one job per tenant
(``concurrency_key``) with a second tenant behind the first's 1,000 jobs, and long-polls
that wake when capacity frees — on the real engine and store, no process, no port."""

from __future__ import annotations

import asyncio
import time

import pytest
from support.backends import fresh_schema

from engine.engine_kit import Harness, HarnessFactory, S, request
from sepp.api.v1 import common_pb2 as pb
from sepp.domain.ids import job_id_text
from sepp.domain.records import JobRecord
from sepp.server.admin import AdminEngine
from sepp.server.rpc.admin import stats_proto
from sepp.storage.config import PostgresSettings


async def test_max_in_flight_3_with_20_reservers_never_holds_more_than_3(make_harness: HarnessFactory) -> None:
    h = await make_harness(queues={"q": {"max_in_flight": 3}})
    for _ in range(60):
        await h.enqueue()
    held: set[bytes] = set()
    peak, samples, done = 0, [], 0

    async def worker(i: int) -> None:
        nonlocal peak, done
        while done < 60:
            jobs = await h.engine.reserve(["q"], 2, None, 0.2, f"w{i}")
            if not jobs:
                continue
            held.update(j.id for j in jobs)
            peak = max(peak, len(held))  # the workers' own overlap log
            counts = await h.store.admin.state_counts("q")  # type: ignore[attr-defined]
            samples.append(counts["q"].reserved)  # and the server's side
            await asyncio.sleep(0.001)
            for job in jobs:
                held.discard(job.id)
                await h.ack(job)
                done += 1

    await asyncio.wait_for(asyncio.gather(*(worker(i) for i in range(20))), 60)
    assert done == 60
    assert peak <= 3 and max(samples) <= 3
    assert (await h.store.admin.state_counts("q"))["q"].completed == 60  # type: ignore[attr-defined]


async def test_a_long_poll_held_back_by_max_in_flight_wakes_when_a_slot_frees(make_harness: HarnessFactory) -> None:
    h = await make_harness(queues={"q": {"max_in_flight": 1}})
    await h.enqueue()
    await h.enqueue()
    (first,) = await h.reserve(n=5)
    waiting = await _held_back_long_poll(h)
    assert not waiting.done()  # held back, not refused
    started = time.monotonic()
    await h.ack(first)
    (second,) = await asyncio.wait_for(waiting, 5)
    assert second.id != first.id and time.monotonic() - started < 5.0


async def test_rate_limit_20_per_s_over_5_fake_seconds(make_harness: HarnessFactory) -> None:
    h = await make_harness(queues={"q": {"rate_limit": "20/s"}})
    for _ in range(150):  # more than 120 + burst: the rate binds, not the supply
        await h.enqueue()
    assert await _ready(h) == 150
    got, start = 0, h.now
    while h.now - start <= 5 * S:
        for job in await h.reserve(n=50):
            got += 1
            await h.ack(job)
        h.clock.advance(0.05)
    assert 100 <= got <= 120 + 20, got   # 20 at once (the burst), then 20 per second


async def test_a_long_poll_held_back_by_the_rate_retries_when_the_next_token_is_due(
        make_harness: HarnessFactory) -> None:
    h = await make_harness(queues={"q": {"rate_limit": "1/s"}})
    await h.enqueue()
    await h.enqueue()
    assert len(await h.reserve(n=5)) == 1
    waiting = await _held_back_long_poll(h)
    assert not waiting.done()
    h.clock.advance(1.0)  # the next token is due; nobody notifies — the reserver polls for it
    (job,) = await asyncio.wait_for(waiting, 5)
    assert job.queue == "q"


async def _ready(h: Harness) -> int:
    counts = await h.store.admin.state_counts("q")  # type: ignore[attr-defined]
    return counts["q"].ready if "q" in counts else 0


def tenant_job(name: str) -> pb.EnqueueRequest:
    """A job of tenant ``name`` (custom entry ``tenant_id``)."""
    req = request()
    req.custom["tenant_id"].string_value = name
    return req


async def test_one_per_tenant_never_overlaps_and_b_is_not_starved_behind_a(make_harness: HarnessFactory) -> None:
    h = await make_harness(queues={"q": {"concurrency_key": "tenant_id", "max_in_flight_per_key": 1}})
    for _ in range(4):
        await h.engine.enqueue_batch([tenant_job("a") for _ in range(250)])   # tenant A's 1,000 jobs first
    await h.engine.enqueue_batch([tenant_job("b") for _ in range(20)])
    running: dict[str, int] = {"a": 0, "b": 0}
    overlap, finished = 0, list[str]()

    async def worker(i: int) -> None:
        nonlocal overlap
        while finished.count("b") < 20:
            jobs = await h.engine.reserve(["q"], 4, None, 0.2, f"w{i}")
            names = [(await h.job(j.id)).extras for j in jobs]
            for job, extras in zip(jobs, names, strict=True):
                who = pb.EnqueueRequest.FromString(extras or b"").custom["tenant_id"].string_value
                running[who] += 1
                overlap = max(overlap, running[who])
                await asyncio.sleep(0.001)
                running[who] -= 1
                await h.ack(job)
                finished.append(who)

    await asyncio.wait_for(asyncio.gather(*(worker(i) for i in range(4))), 60)
    assert overlap == 1                        # within a tenant, never two at once
    assert finished.count("b") == 20
    assert len(finished) <= 100, len(finished)  # B ran alongside A, not after A's 1,000


async def test_no_consumer_flags_ready_jobs_nobody_reserves_within_consumer_timeout(
        make_harness: HarnessFactory) -> None:
    h = await make_harness(queues={"q": {"consumer_timeout": 60.0}, "never": {"consumer_timeout": 0.0}})
    admin = AdminEngine(h.parts, h.store.admin)

    async def flagged(name: str = "q") -> bool:
        (view,) = await admin.stats([name])
        return view.no_consumer

    assert not await flagged()                  # no READY jobs
    await h.enqueue()
    await h.enqueue("never")
    assert not await flagged()                  # a job just enqueued: not yet
    h.clock.advance(60.0)
    assert not await flagged()                  # at the timeout exactly: not yet
    h.clock.advance(0.001)
    assert await flagged() and not await flagged("never")   # one past: flagged; 0 = never
    msg = stats_proto((await admin.stats(["q"]))[0])
    assert msg.no_consumer and not msg.HasField("last_reserve_at")
    h.parts.workers.reserved("w1", "host", ["q"], 1, "")   # a worker's Reserve (what the engine notes)
    assert not await flagged()
    assert stats_proto((await admin.stats(["q"]))[0]).last_reserve_at.seconds == h.now // S
    h.clock.advance(60.001)
    assert await flagged()                      # that worker went quiet
    await admin.set_paused("q", True)
    assert not await flagged()                  # paused on purpose: not flagged


async def _held(admin: AdminEngine, name: str = "q") -> tuple[int, int, int, int]:
    (view,) = await admin.stats([name])
    assert view.held_back is not None
    hb = view.held_back
    return hb.max_in_flight, hb.rate_limit, hb.per_key, hb.total


async def test_held_back_counts_what_each_limit_holds_back_right_now(make_harness: HarnessFactory) -> None:
    h = await make_harness(queues={"q": {"max_in_flight": 3, "rate_limit": "2/s", "rate_burst": 4,
                                         "concurrency_key": "tenant_id", "max_in_flight_per_key": 2},
                                   "free": {}})
    admin = AdminEngine(h.parts, h.store.admin)
    await h.enqueue("free")
    (free,) = await admin.stats(["free"])
    assert free.held_back is None and stats_proto(free).HasField("held_back") is False  # no limit: no view
    await h.engine.enqueue_batch([tenant_job("a") for _ in range(6)])
    await h.engine.enqueue_batch([tenant_job("b") for _ in range(2)])
    # 8 READY, none RESERVED: 3 slots (5 held), 4 tokens (4 held), 2 per tenant (A's 4 held);
    # together a reserve gets min(3, 4, 4) = 3, so 5 are held back.
    assert await _held(admin) == (5, 4, 4, 5)
    assert len(await h.reserve(n=10)) == 3       # what the view said would pass
    # 5 READY (A: 4, B: 1), 3 RESERVED (A: 2, B: 1), 1 token: no slot, A full, B one more.
    assert await _held(admin) == (5, 4, 4, 5)
    h.clock.advance(10.0)                        # the bucket refills to its burst
    assert await _held(admin) == (5, 1, 4, 5)
    msg = stats_proto((await admin.stats(["q"]))[0])
    assert (msg.held_back.max_in_flight, msg.held_back.rate_limit, msg.held_back.per_key, msg.held_back.total,
            msg.held_back.per_key_scan_limited) == (5, 1, 4, 5, False)
    view = (await admin.stats(["q"]))[0].held_back
    assert view is not None and view.limited == ("max_in_flight", "rate_limit", "per_key")


async def test_held_back_per_key_looks_at_the_first_key_scan_ready_jobs(make_harness: HarnessFactory,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    from sepp.storage import flow_keys
    monkeypatch.setattr(flow_keys, "KEY_SCAN", 5)
    h = await make_harness(queues={"q": {"concurrency_key": "tenant_id", "max_in_flight_per_key": 1}})
    admin = AdminEngine(h.parts, h.store.admin)
    await h.engine.enqueue_batch([tenant_job("a") for _ in range(8)])
    (view,) = await admin.stats(["q"])
    assert view.held_back is not None
    assert (view.held_back.per_key, view.held_back.total, view.held_back.scan_limited) == (4, 7, True)


async def test_the_no_consumer_gauge_moves_with_the_flag(make_harness: HarnessFactory) -> None:
    from prometheus_client.parser import text_string_to_metric_families

    from sepp.server.metrics.collector import Metrics

    h = await make_harness(queues={"q": {"consumer_timeout": 60.0}, "never": {"consumer_timeout": 0.0}})
    metrics = Metrics(h.parts, gauge_interval=0)   # every scrape reads the store

    async def gauge() -> dict[str, float]:
        await metrics.refresh_gauges()
        families = text_string_to_metric_families(metrics.render().decode())
        (family,) = [f for f in families if f.name == "sepp_queue_no_consumer"]
        assert family.type == "gauge"
        return {s.labels["queue"]: s.value for s in family.samples}

    try:
        await h.enqueue()
        await h.enqueue("never")
        assert await gauge() == {"q": 0, "never": 0}
        h.clock.advance(60.001)
        assert await gauge() == {"q": 1, "never": 0}           # flagged: 1; consumer_timeout 0: never
        h.parts.workers.reserved("w1", "host", ["q"], 1, "")  # a worker's Reserve (what the engine notes)
        assert await gauge() == {"q": 0, "never": 0}
        h.clock.advance(60.001)
        assert (await gauge())["q"] == 1                        # that worker went quiet
        (job,) = await h.reserve(n=1)
        await h.ack(job)                                        # no READY job left: not flagged
        assert (await gauge())["q"] == 0
    finally:
        await metrics.stop()


async def test_a_long_poll_held_back_wakes_when_an_update_raises_the_limit(make_harness: HarnessFactory) -> None:
    h = await make_harness(queues={"q": {"max_in_flight": 1}})
    admin = AdminEngine(h.parts, h.store.admin)
    await h.enqueue()
    await h.enqueue()
    assert len(await h.reserve(n=5)) == 1
    waiting = await _held_back_long_poll(h)
    assert not waiting.done()
    started = time.monotonic()
    await admin.update_queue("q", {"max_in_flight": 2}, ["max_in_flight"])
    (job,) = await asyncio.wait_for(waiting, 5)
    assert job.queue == "q" and time.monotonic() - started < 5.0


# ---------------------------------------------------------------------- wake-ups of freed capacity


async def _held_back_long_poll(h: Harness, worker: str = "w2") -> asyncio.Future[list[JobRecord]]:
    """A long-polling Reserve of "q", checked to be waiting (held back, not refused) and
    parked on its wake-up: its leasing attempt has finished. (One still in the store holds
    back the reclaim pass it may race with: ``Granting``, on PostgreSQL.)"""
    waiting = asyncio.ensure_future(h.engine.reserve(["q"], 1, None, 10.0, worker))
    for _ in range(1000):   # ends as soon as it parks; 10 s at most on a loaded machine
        if waiting.done() or h.engine.parked(worker):
            break
        await asyncio.sleep(0.01)
    assert not waiting.done() and h.engine.parked(worker) == 1
    return waiting


async def test_a_long_poll_wakes_when_an_expired_lease_dead_letters_its_job(make_harness: HarnessFactory) -> None:
    h = await make_harness(queues={"q": {"max_in_flight": 1}})
    await h.enqueue(max_attempts=1)      # its lease running out is its last attempt
    await h.enqueue()
    (first,) = await h.reserve(n=5, lease_s=5)
    waiting = await _held_back_long_poll(h)
    h.clock.advance(6.0)
    started = time.monotonic()
    assert await h.sweeper.reclaim_once() == 1
    (second,) = await asyncio.wait_for(waiting, 5)   # the slot the dead letter freed, at once
    assert second.id != first.id and time.monotonic() - started < 5.0
    assert (await h.job(first.id)).state == 5        # DEAD_LETTERED


async def test_a_long_poll_wakes_when_a_job_cancelled_while_reserved_frees_its_slot(
        make_harness: HarnessFactory) -> None:
    h = await make_harness(queues={"q": {"concurrency_key": "tenant_id", "max_in_flight_per_key": 1}})
    admin = AdminEngine(h.parts, h.store.admin)
    await h.engine.enqueue_batch([tenant_job("a"), tenant_job("a")])
    (first,) = await h.reserve(n=5, lease_s=5)
    await admin.cancel(job_id_text(first.id))        # RESERVED: cancel requested; the worker is gone
    waiting = await _held_back_long_poll(h)
    h.clock.advance(6.0)
    assert await h.sweeper.reclaim_once() == 1        # the expiry cancels it
    (second,) = await asyncio.wait_for(waiting, 5)
    assert second.id != first.id and (await h.job(first.id)).state == 6   # CANCELLED


@pytest.mark.postgres_only(reason="two nodes on one database")
async def test_a_long_poll_on_another_node_wakes_when_a_reclaim_frees_a_slot(make_harness: HarnessFactory) -> None:
    shared = {"postgres": PostgresSettings(schema=fresh_schema())}
    queues = {"q": {"max_in_flight": 1}}
    one = await make_harness(queues=queues, node_name="n1", storage_settings=shared)
    two = await make_harness(queues=queues, node_name="n2", storage_settings=shared)
    notifier = two.parts.notifier
    two.store.subscribe(lambda q: notifier.ready_all() if q is None else notifier.ready(q), lambda: None)
    await one.enqueue(max_attempts=1)
    await one.enqueue()
    (first,) = await one.reserve(n=5, lease_s=5)
    waiting = await _held_back_long_poll(two)        # node two's worker waits for the slot
    one.clock.advance(6.0)
    started = time.monotonic()
    assert await one.sweeper.reclaim_once() == 1     # node one's sweep dead-letters the job
    (second,) = await asyncio.wait_for(waiting, 5)
    assert second.id != first.id and time.monotonic() - started < 5.0


async def test_a_long_poll_wakes_when_an_admin_deletes_a_reserved_job(make_harness: HarnessFactory) -> None:
    h = await make_harness(queues={"q": {"max_in_flight": 1}})
    admin = AdminEngine(h.parts, h.store.admin)
    await h.enqueue()
    await h.enqueue()
    (first,) = await h.reserve(n=5)
    waiting = await _held_back_long_poll(h)
    await admin.delete_job(job_id_text(first.id))
    (second,) = await asyncio.wait_for(waiting, 5)
    assert second.id != first.id
