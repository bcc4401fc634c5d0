"""Conformance: the periodic schedules' rows — ``Store.put_periodic``,
``load_periodic``, ``set_periodic_paused``, ``delete_periodic`` and ``record_periodic_runs``
on every backend, and that they survive reopening the store (SQLite keeps them in its file,
PostgreSQL in its schema, shared by every node)."""

from __future__ import annotations

from sepp.domain.records import PeriodicRecord, PeriodicRun
from sepp.storage.base import Store
from storage.conformance_kit import NOW, S, StoreFactory

DEF = '{"name":"a"}'


async def test_a_schedule_is_created_then_replaced_keeping_its_state(store: Store) -> None:
    assert await store.load_periodic() == []
    assert await store.put_periodic("a", DEF, "config", NOW) is True
    assert await store.load_periodic() == [PeriodicRecord("a", DEF, "config", False, NOW, 0, 0, b"", "", NOW)]
    await store.record_periodic_runs([PeriodicRun("a", NOW + S, b"j" * 16, "", NOW + 2 * S)])
    assert await store.put_periodic("a", '{"name":"a","v":2}', "admin", NOW + 3 * S) is False
    (rec,) = await store.load_periodic(["a"])
    assert rec == PeriodicRecord("a", '{"name":"a","v":2}', "admin", False, NOW, NOW + S, NOW + 2 * S, b"j" * 16, "",
                                 NOW + 3 * S)


async def test_load_by_names_leaves_out_the_unknown_ones(store: Store) -> None:
    for name in ("c", "a", "b"):
        await store.put_periodic(name, DEF, "admin", NOW)
    assert [r.name for r in await store.load_periodic()] == ["a", "b", "c"]
    assert [r.name for r in await store.load_periodic(["c", "zz", "a"])] == ["a", "c"]
    assert await store.load_periodic([]) == []


async def test_a_resume_restarts_active_since_and_a_repeated_pause_does_not(store: Store) -> None:
    await store.put_periodic("a", DEF, "admin", NOW)
    paused = await store.set_periodic_paused("a", True, NOW + S)
    assert paused is not None and (paused.paused, paused.active_since, paused.updated_at) == (True, NOW, NOW + S)
    again = await store.set_periodic_paused("a", True, NOW + 2 * S)
    assert again is not None and again.active_since == NOW
    resumed = await store.set_periodic_paused("a", False, NOW + 5 * S)
    assert resumed is not None and (resumed.paused, resumed.active_since) == (False, NOW + 5 * S)
    running = await store.set_periodic_paused("a", False, NOW + 9 * S)  # resuming a running one changes nothing
    assert running is not None and running.active_since == NOW + 5 * S
    assert await store.set_periodic_paused("nope", True, NOW) is None


async def test_runs_recorded_in_any_order_leave_the_latest(store: Store) -> None:
    await store.put_periodic("a", DEF, "admin", NOW)
    late = PeriodicRun("a", NOW + 10 * S, b"2" * 16, "", NOW + 11 * S)
    early = PeriodicRun("a", NOW + 5 * S, b"1" * 16, "", NOW + 6 * S)
    await store.record_periodic_runs([late, PeriodicRun("gone", NOW, b"", "x", NOW)])  # an unknown name is ignored
    await store.record_periodic_runs([early])  # another node, later: last_tick only grows, the last run stays
    (rec,) = await store.load_periodic()
    assert (rec.last_tick, rec.last_run_at, rec.last_job_id) == (NOW + 10 * S, NOW + 11 * S, b"2" * 16)
    trigger = PeriodicRun("a", 0, b"3" * 16, "", NOW + 12 * S)  # a manual trigger: last run, not last tick
    failed = PeriodicRun("a", NOW + 15 * S, b"", "UNKNOWN_QUEUE: strict mode", NOW + 15 * S)
    await store.record_periodic_runs([trigger])
    (rec,) = await store.load_periodic()
    assert (rec.last_tick, rec.last_run_at, rec.last_job_id) == (NOW + 10 * S, NOW + 12 * S, b"3" * 16)
    await store.record_periodic_runs([failed])
    (rec,) = await store.load_periodic()
    assert (rec.last_tick, rec.last_job_id, rec.last_error) == (NOW + 15 * S, b"", "UNKNOWN_QUEUE: strict mode")


async def test_a_deleted_schedule_is_gone(store: Store) -> None:
    await store.put_periodic("a", DEF, "admin", NOW)
    assert await store.delete_periodic("a") is True
    assert await store.delete_periodic("a") is False
    assert await store.load_periodic() == []


async def test_schedules_survive_reopening_the_store(store_factory: StoreFactory) -> None:
    first = await store_factory()
    await first.put_periodic("a", DEF, "config", NOW)
    await first.set_periodic_paused("a", True, NOW + S)
    await first.record_periodic_runs([PeriodicRun("a", NOW, b"j" * 16, "", NOW)])
    before = await first.load_periodic()
    await first.close()
    second = await store_factory()
    assert await second.load_periodic() == before
