"""Periodic schedules through the real engine and store with a fake clock
(docs/periodic.md): one job per tick on three nodes sharing one PostgreSQL schema, catch-up
after downtime ("latest" / "none"), DST in Europe/Berlin, pause and resume, and a rejected
run recorded rather than skipped. Nodes are in-process engines + schedulers on stores of one
database; ``run_due()`` is one round at the fake clock's time (no loop, no sleep)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from support.backends import store_settings

from sepp.domain.clock import FakeClock
from sepp.server.config import ServerConfig
from sepp.server.engine import JobEngine
from sepp.server.notifier import Notifier
from sepp.server.parts import ServerParts
from sepp.server.periodic.scheduler import PeriodicScheduler
from sepp.server.periodic.spec import PeriodicSettings
from sepp.server.periodic.timetable import rfc3339, tick_key
from sepp.server.queues import QueueRegistry
from sepp.storage.admin import JobQuery
from sepp.storage.base import Store
from sepp.storage.factory import open_store

S = 1_000_000
#: The fake clock's start: 2026-01-01T00:00:00Z, a whole second (a tick of every "1s").
T0 = FakeClock().now()


def every(name: str = "tick", period: str = "1s", **more: Any) -> PeriodicSettings:
    return PeriodicSettings(name=name, every=period, queue="q", job_type="t", **more)


def utc(*parts: int) -> int:
    year, month, day, hour, *rest = parts
    return int(datetime(year, month, day, hour, rest[0] if rest else 0, tzinfo=UTC).timestamp()) * S


class Cluster:
    """Nodes on one database (PostgreSQL: one schema; SQLite: one folder, so one node at a
    time) and the fake clock they share."""

    def __init__(self, backend: str, folder: Path) -> None:
        self.settings = store_settings(backend)
        self.folder = folder
        self.clock = FakeClock()
        self.stores: list[Store] = []

    async def node(self, *declared: PeriodicSettings, **config: Any) -> PeriodicScheduler:
        """A node (store, engine, scheduler) with ``declared`` as its [[periodic]] tables,
        started as ``sepp serve`` starts it, without the loop."""
        cfg = ServerConfig(data_dir=self.folder, periodic=declared, **self.settings, **config)
        store = open_store(cfg, self.clock)
        await store.open()
        self.stores.append(store)
        registry = QueueRegistry(cfg.queue_defaults, cfg.strict, cfg.limits.max_encoding_bytes, cfg.limits.max_queues)
        registry.load(await store.load_queues(), dict(cfg.queues))
        parts = ServerParts.build(cfg, store, registry, Notifier(), clock=self.clock)
        scheduler = PeriodicScheduler(parts, JobEngine(parts), cfg.periodic)
        await scheduler.write_declared()
        await scheduler.reload()
        return scheduler

    async def stop(self, node: PeriodicScheduler) -> None:
        await node.stop()
        await node.store.close()
        self.stores.remove(node.store)

    async def keys(self, queue: str = "q") -> list[str]:
        """The idempotency keys of every job of ``queue``, in enqueue order."""
        page = await self.stores[0].admin.list_jobs(JobQuery(queue=queue), None, 10_000)
        return sorted(s.record.idempotency_key or "" for s in page.jobs)


@pytest.fixture
async def cluster(backend: str, tmp_path: Path) -> AsyncIterator[Cluster]:
    """Nodes of ``backend`` (the module-scoped fixture of support.servers: both backends)."""
    c = Cluster(backend, tmp_path / "data")
    yield c
    for store in c.stores:
        await store.close()


async def step(nodes: list[PeriodicScheduler], clock: FakeClock, seconds: float = 1.0) -> None:
    """Move the clock, then run one round on every node at the same moment (they race)."""
    clock.advance(seconds)
    await asyncio.gather(*(n.run_due() for n in nodes))


@pytest.mark.postgres_only(reason="several nodes on one database: SQLite's folder holds one process")
@pytest.mark.parametrize("catch_up", ["latest", "none"])
async def test_every_second_on_three_nodes_makes_one_job_per_tick_and_catches_up_after_a_stop(
        cluster: Cluster, catch_up: str) -> None:
    spec = every(catch_up=catch_up)
    nodes = [await cluster.node(spec, node_name=f"n{i}") for i in range(3)]
    for _ in range(10):
        await step(nodes, cluster.clock)
    ticks = [T0 + i * S for i in range(1, 11)]
    assert await cluster.keys() == [tick_key("tick", t) for t in ticks]  # exactly one job per tick
    assert sum(n.runs for n in nodes) >= 10  # racing nodes: the later enqueues were deduplicated
    for node in nodes:
        await cluster.stop(node)
    cluster.clock.advance(5.5)  # every node down for ticks T0+11 .. T0+15
    nodes = [await cluster.node(spec, node_name=f"n{i}") for i in range(3)]
    await asyncio.gather(*(n.run_due() for n in nodes))
    missed = [tick_key("tick", T0 + 15 * S)] if catch_up == "latest" else []
    assert await cluster.keys() == [tick_key("tick", t) for t in ticks] + missed
    await step(nodes, cluster.clock, 0.5)  # T0+16: back to one job per tick
    assert (await cluster.keys())[-1] == tick_key("tick", T0 + 16 * S)
    assert len(await cluster.keys()) == 10 + len(missed) + 1
    (row,) = await nodes[0].store.load_periodic()
    assert row.last_tick == T0 + 16 * S and len(row.last_job_id) == 16 and row.last_error == ""


@pytest.mark.parametrize("catch_up", ["latest", "none"])
async def test_after_a_five_second_gap_latest_runs_once_and_none_runs_nothing(cluster: Cluster, catch_up: str) -> None:
    spec = every(catch_up=catch_up)
    node = await cluster.node(spec)
    await step([node], cluster.clock)
    await cluster.stop(node)
    cluster.clock.advance(5)  # ticks T0+2 .. T0+6 pass with no node up
    node = await cluster.node(spec)
    runs = await node.run_due()
    assert [r.tick for r in runs] == ([T0 + 6 * S] if catch_up == "latest" else [])
    await step([node], cluster.clock)
    expected = [T0 + S] + ([T0 + 6 * S] if catch_up == "latest" else []) + [T0 + 7 * S]
    assert await cluster.keys() == [tick_key("tick", t) for t in expected]


async def test_a_new_schedule_does_not_run_the_ticks_before_it_existed(cluster: Cluster) -> None:
    cluster.clock.advance(0.5)
    node = await cluster.node(every(period="1m"))
    assert await node.run_due() == []
    cluster.clock.set(T0 + 60 * S)
    assert [r.tick for r in await node.run_due()] == [T0 + 60 * S]


async def test_a_late_round_runs_each_tick_that_came_due_while_the_node_was_up(cluster: Cluster) -> None:
    node = await cluster.node(every(catch_up="none"))  # catch_up is about downtime, not a late loop
    await step([node], cluster.clock, 3.2)  # the loop was blocked for three ticks
    assert await cluster.keys() == [tick_key("tick", T0 + i * S) for i in (1, 2, 3)]


@pytest.mark.sqlite_only(reason="the timetable is backend-neutral; the store part is covered above")
@pytest.mark.parametrize(("start", "expected"), [
    # Spring forward (2026-03-29, 02:00 CET → 03:00 CEST): 02:30 does not exist that day; the
    # run happens once, right after the jump (03:00 CEST = 01:00 UTC).
    (utc(2026, 3, 28, 12), [utc(2026, 3, 29, 1), utc(2026, 3, 30, 0, 30)]),
    # Fall back (2026-10-25, 03:00 CEST → 02:00 CET): 02:30 happens twice; the run happens
    # once, at the first (02:30 CEST = 00:30 UTC).
    (utc(2026, 10, 24, 12), [utc(2026, 10, 25, 0, 30), utc(2026, 10, 26, 1, 30)]),
], ids=["spring-forward", "fall-back"])
async def test_a_0230_berlin_schedule_runs_once_a_day_across_dst(cluster: Cluster, start: int,
                                                                  expected: list[int]) -> None:
    cluster.clock.set(start)
    spec = PeriodicSettings(name="night", cron="30 2 * * *", timezone="Europe/Berlin", queue="q", job_type="t")
    node = await cluster.node(spec)
    for _ in range(48 * 12):  # two days in five-minute steps
        await step([node], cluster.clock, 300)
    assert await cluster.keys() == [tick_key("night", t) for t in expected]
    assert (await cluster.keys())[0].endswith(rfc3339(expected[0]))


async def test_a_paused_schedule_runs_nothing_and_its_pause_is_not_caught_up(cluster: Cluster) -> None:
    node = await cluster.node(every())
    await step([node], cluster.clock)
    await node.store.set_periodic_paused("tick", True, cluster.clock.now())
    await step([node], cluster.clock)  # the round re-reads the row: paused, no job
    await step([node], cluster.clock)
    await node.store.set_periodic_paused("tick", False, cluster.clock.now())
    await node.reload()
    assert await node.run_due() == []  # T0+2, T0+3 were paused: not missed ticks
    await step([node], cluster.clock)
    assert await cluster.keys() == [tick_key("tick", T0 + S), tick_key("tick", T0 + 4 * S)]


async def test_a_schedule_deleted_elsewhere_stops_at_its_next_tick(cluster: Cluster) -> None:
    node = await cluster.node()
    await node.store.put_periodic("x", every("x").to_json(), "admin", cluster.clock.now())
    await node.reload()
    await node.store.delete_periodic("x")
    await step([node], cluster.clock)
    assert await cluster.keys() == [] and "x" not in node.entries


async def test_a_rejected_run_is_recorded_with_its_reason(cluster: Cluster) -> None:
    node = await cluster.node(every(payload="x" * 2000), queues={"q": {"limits": {"max_payload_bytes": 1000}}})
    (run,) = await step_runs(node, cluster.clock)
    assert run.job_id == b"" and run.error.startswith("PAYLOAD_TOO_LARGE")
    (row,) = await node.store.load_periodic()
    assert (row.last_tick, row.last_error) == (T0 + S, run.error)


async def step_runs(node: PeriodicScheduler, clock: FakeClock) -> list[Any]:
    """Move the clock a second and run one round; the runs it recorded."""
    clock.advance(1)
    return await node.run_due()


async def test_a_node_that_runs_late_runs_every_tick_it_missed_while_up(cluster: Cluster) -> None:
    """A starved loop is not downtime: each tick that came due while the node ran gets its own
    job (no catch_up), oldest first; the row's last run is the latest tick."""
    node = await cluster.node(every(catch_up="latest"))
    await step([node], cluster.clock)  # T0+1
    cluster.clock.advance(4.5)  # the loop oversleeps ticks T0+2 .. T0+5
    runs = await node.run_due()
    assert [r.tick for r in runs] == [T0 + i * S for i in range(2, 6)]
    assert await cluster.keys() == [tick_key("tick", T0 + i * S) for i in range(1, 6)]
    (row,) = await node.store.load_periodic()
    assert row.last_tick == T0 + 5 * S and row.last_job_id == runs[-1].job_id
    await step([node], cluster.clock, 0.5)  # T0+6: on schedule again
    assert (await cluster.keys())[-1] == tick_key("tick", T0 + 6 * S)


async def test_a_very_late_node_runs_at_most_late_ticks_and_the_latest(cluster: Cluster) -> None:
    from sepp.server.periodic.scheduler import LATE_TICKS

    node = await cluster.node(every())
    await step([node], cluster.clock)  # T0+1
    cluster.clock.advance(LATE_TICKS + 50)  # ticks T0+2 .. T0+LATE_TICKS+51 came due
    runs = await node.run_due()
    expected = [T0 + i * S for i in range(2, 2 + LATE_TICKS)] + [T0 + (LATE_TICKS + 51) * S]
    assert [r.tick for r in runs] == expected  # LATE_TICKS oldest first, then the latest; one past is left out
    assert len(await cluster.keys()) == 1 + LATE_TICKS + 1
async def test_a_tick_run_twice_makes_one_job_even_when_the_queue_keeps_no_keys(cluster: Cluster) -> None:
    """Found by attacking (attack notes F1): exactly once rests on the tick's idempotency key,
    and a queue with ``dedup_window = 0`` (or one shorter than the lag between two nodes, or
    than a restart after a kill -9 between the enqueue and the run's record) got a second job
    for the same tick. Two loops that both read the row before either recorded the tick — two
    nodes, or one node before and after a crash — now make one job per tick."""
    first = await cluster.node(every(), queues={"q": {"dedup_window": 0}})
    second = PeriodicScheduler(first.parts, first.engine)  # another loop on the same store
    await second.reload()
    for _ in range(3):
        await step([first, second], cluster.clock)
    assert await cluster.keys() == [tick_key("tick", T0 + i * S) for i in (1, 2, 3)]
    assert first.runs + second.runs == 6  # both enqueued every tick; the later one was deduplicated


@pytest.mark.postgres_only(reason="several nodes on one database: SQLite's folder holds one process")
async def test_three_nodes_make_one_job_per_tick_for_a_queue_with_no_dedup_window(cluster: Cluster) -> None:
    """Attack notes F1 on the cluster: three nodes racing every tick into a queue whose
    ``dedup_window`` is 0 made up to three jobs per tick."""
    nodes = [await cluster.node(every(), node_name=f"n{i}", queues={"q": {"dedup_window": 0}}) for i in range(3)]
    for _ in range(5):
        await step(nodes, cluster.clock)
    assert await cluster.keys() == [tick_key("tick", T0 + i * S) for i in range(1, 6)]
