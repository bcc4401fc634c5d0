"""Live job events: one event per state change on the paths that made none before —

* a due job promoted by a Reserve on its way (every Reserve promotes every queue's due
  jobs before it leases) is a ``promoted`` event, once: the sweep finds nothing left;
* a bulk redrive of dead letters (``requeue_dead``: RequeueDeadLettered, the dead-letter
  page, a bulk requeue run) is one ``requeued`` event per job; a bulk cancel and a bulk
  requeue of cancelled jobs (through the single-job operations) report each job too;
* on PostgreSQL, jobs committed through the SQL functions ``enqueue`` / ``enqueue_batch``
  reach a watcher as ``enqueued`` events (read after the node hears the commit, a few ms
  later) and are counted in ``sepp_jobs_enqueued_sql_total`` — on every node that hears them.

Both backends but the last (PostgreSQL only)."""

from __future__ import annotations

from functools import partial

import asyncpg
import pytest
from support.backends import PG_TEST_DSN
from support.worker import until

from engine.engine_kit import Harness, HarnessFactory, S
from sepp.domain.ids import job_id_bytes, job_id_text
from sepp.domain.listing import DeadFilter, JobQuery
from sepp.domain.states import State
from sepp.server import job_events as ev
from sepp.server.admin.bulk import BulkActions
from sepp.server.admin.jobs import JobAdmin
from sepp.server.job_events import Watcher
from sepp.server.metrics import Metrics
from sepp.server.sql_enqueues import SqlEnqueues

_READY, _SCHEDULED, _DEAD = int(State.READY), int(State.SCHEDULED), int(State.DEAD_LETTERED)


async def test_a_job_a_reserve_promotes_on_its_way_is_reported_once(harness: Harness) -> None:
    await harness.enqueue("y")
    assert len(await harness.reserve("y")) == 1  # queue y known
    w = harness.parts.job_events.watch()
    job_id, _ = await harness.enqueue("x", at_us=harness.now + S)
    run_at = harness.now + S
    assert [e.kind for e in w.take()] == [ev.ENQUEUED]
    harness.clock.advance(2)
    assert await harness.reserve("y") == []  # promotes x's job as a side effect
    [e] = w.take()
    assert (e.kind, e.job_id, e.queue, e.job_type, e.state, e.attempt, e.run_at, e.at) == (
        ev.PROMOTED, job_id, "x", "t", _READY, 0, run_at, harness.now)
    assert await harness.sweeper.promote_once() == 0
    assert w.take() == []  # once: the sweep found nothing left to promote


async def test_a_retry_a_reserve_of_its_own_queue_promotes_comes_before_its_reservation(
        make_harness: HarnessFactory) -> None:
    # A flow-limited queue takes the promotion statement that holds the flow lock (PostgreSQL).
    h = await make_harness(queues={"x": {"max_in_flight": 5}})
    w = h.parts.job_events.watch()
    job_id, _ = await h.enqueue("x")
    [job] = await h.reserve("x")
    await h.nack(job, retry_after_s=10, message="later")
    w.take()
    h.clock.advance(11)
    [again] = await h.reserve("x")
    assert again.id == job_id
    got = w.take()
    assert [(e.kind, e.attempt) for e in got] == [(ev.PROMOTED, 1), (ev.RESERVED, 2)]
    assert got[0].run_at == h.now - S and got[0].position < got[1].position


async def test_the_promotion_lag_counts_a_reserves_promotions(harness: Harness) -> None:
    metrics = Metrics(harness.parts)
    await harness.enqueue("x", at_us=harness.now + S)
    harness.clock.advance(3)
    assert len(await harness.reserve("x")) == 1
    assert sum(metrics.promotion_lag.counts) == 1 and metrics.promotion_lag.total == pytest.approx(2.0)
    metrics.close()


async def _dead(h: Harness, queue: str, n: int) -> list[bytes]:
    ids = [(await h.enqueue(queue, max_attempts=1))[0] for _ in range(n)]
    for job in await h.reserve(queue, n):
        await h.nack(job, dead_letter="bad")
    return ids


async def test_a_bulk_redrive_reports_each_job_requeued(harness: Harness) -> None:
    admin = JobAdmin(harness.parts, harness.store.admin, lambda: None)
    ids = await _dead(harness, "q", 3)
    other = await _dead(harness, "r", 1)
    w = harness.parts.job_events.watch(queues=["q"])
    harness.clock.advance(1)
    assert await admin.requeue_dead(DeadFilter(queue="q")) == (3, 3)
    got = w.take()
    assert sorted(e.job_id for e in got) == sorted(ids)
    assert {(e.kind, e.queue, e.job_type, e.state, e.attempt, e.reason) for e in got} == {
        (ev.REQUEUED, "q", "t", _READY, 0, "requeued")}
    assert {(e.at, e.run_at) for e in got} == {(harness.now, harness.now)}
    everything = harness.parts.job_events.watch()
    assert await admin.requeue_dead(DeadFilter()) == (1, 1)  # every queue: r's job
    assert [(e.kind, e.job_id) for e in everything.take()] == [(ev.REQUEUED, other[0])]
    assert w.take() == []


async def test_bulk_runs_report_every_job_they_change(harness: Harness) -> None:
    admin = JobAdmin(harness.parts, harness.store.admin, lambda: None)
    bulk = BulkActions(admin, chunk=2, concurrency=2)
    ids = await _dead(harness, "q", 3)
    w = harness.parts.job_events.watch()
    run = await bulk.start("requeue", JobQuery(queue="q", state=_DEAD), 3)  # the redrive path
    await bulk.wait(run.id)
    assert sorted(e.job_id for e in w.take() if e.kind == ev.REQUEUED) == sorted(ids)
    run = await bulk.start("cancel", JobQuery(queue="q", state=_READY), 3)  # one by one
    await bulk.wait(run.id)
    cancelled = w.take()
    assert sorted(e.job_id for e in cancelled) == sorted(ids)
    assert {(e.kind, e.state) for e in cancelled} == {(ev.CANCELLED, int(State.CANCELLED))}
    outcome = await bulk.apply("requeue", int(State.CANCELLED), [job_id_text(i) for i in ids])  # a selection
    assert outcome.done == 3
    assert sorted((e.kind, e.job_id) for e in w.take()) == sorted((ev.REQUEUED, i) for i in ids)
    assert (await bulk.apply("cancel", _READY, [job_id_text(ids[0])])).done == 1
    assert [(e.kind, e.job_id) for e in w.take()] == [(ev.CANCELLED, ids[0])]


# ---------------------------------------------------------------------- enqueued through SQL


def _has(w: Watcher, n: int) -> bool:
    return len(w.pending) >= n


def _counted(metrics: Metrics, n: int) -> bool:
    return sum(metrics.enqueued_sql.values()) == n


async def _sql_enqueue(schema: str, *calls: str) -> list[bytes]:
    """Run each SQL statement (each returns job_id first) in one transaction; the ids."""
    conn = await asyncpg.connect(PG_TEST_DSN)
    out: list[bytes] = []
    try:
        async with conn.transaction():
            for sql in calls:
                for row in await conn.fetch(sql.format(s=schema)):
                    raw = job_id_bytes(str(row["job_id"]))
                    assert raw is not None
                    out.append(raw)
    finally:
        await conn.close()
    return out


@pytest.mark.postgres_only
async def test_jobs_enqueued_through_sql_reach_the_watchers_of_every_node_and_are_counted(
        make_harness: HarnessFactory) -> None:
    first = await make_harness()
    schema = first.store.schema  # type: ignore[attr-defined]
    second = await make_harness(storage_settings={"postgres": {"schema": schema}})
    nodes = [(h, SqlEnqueues(h.parts), Metrics(h.parts)) for h in (first, second)]
    for _h, service, _m in nodes:
        await service.start()
    watchers = [first.parts.job_events.watch(), second.parts.job_events.watch(queues=["sqlq"])]
    try:
        ids = await _sql_enqueue(
            schema,
            "SELECT job_id FROM {s}.enqueue('sqlq', 'one')",
            "SELECT job_id FROM {s}.enqueue('sqlq', 'later', scheduled_at => now() + interval '1 hour')",
            "SELECT job_id FROM {s}.enqueue('sqlq', 'keyed', idempotency_key => 'k')",
            "SELECT job_id FROM {s}.enqueue('sqlq', 'keyed', idempotency_key => 'k')",  # deduplicated
            # 1,100 jobs: two blocks of seqs; another queue.
            "SELECT job_id FROM {s}.enqueue_batch(array_fill('other'::text, ARRAY[1100]), "
            "array_fill('b'::text, ARRAY[1100]))")
        assert ids[2] == ids[3]
        stored = [*ids[:3], *ids[4:]]
        for w, want in zip(watchers, (len(stored), 3), strict=True):
            await until(partial(_has, w, want), what="the enqueued events of the SQL commit")
        every, only_sqlq = (w.take() for w in watchers)
        assert [e.job_id for e in every] == stored  # in seq order, once each, no deduplicated one
        assert [e.job_id for e in only_sqlq] == stored[:3]
        one, later, keyed = every[:3]
        assert {e.kind for e in every} == {ev.ENQUEUED} and {e.node for e in every} == {""}
        assert (one.state, one.job_type, one.attempt, one.run_at) == (_READY, "one", 0, one.at)
        assert (later.state, later.job_type) == (_SCHEDULED, "later") and later.run_at > later.at + 3500 * S
        assert (keyed.queue, keyed.job_type, every[-1].queue) == ("sqlq", "keyed", "other")
        # Counted whole on every node that heard it (deduplicated jobs not counted).
        for _h, _service, metrics in nodes:
            await until(partial(_counted, metrics, len(stored)), what="the SQL enqueues counted")
            assert dict(metrics.enqueued_sql) == {"sqlq": 3, "other": 1100}
            assert not metrics.enqueued  # not this node's admissions
            text = metrics.render().decode()
            assert 'sepp_jobs_enqueued_sql_total{queue="sqlq"} 3' in text
        assert [service.events for _h, service, _m in nodes] == [len(stored)] * 2  # each node read them once
    finally:
        for h, service, metrics in nodes:
            await service.stop()
            metrics.close()
            for w in watchers:
                h.parts.job_events.unwatch(w)


@pytest.mark.postgres_only
async def test_nothing_is_read_for_sql_enqueues_while_nobody_watches(make_harness: HarnessFactory) -> None:
    h = await make_harness()
    service, metrics = SqlEnqueues(h.parts), Metrics(h.parts)
    await service.start()
    try:
        await _sql_enqueue(h.store.schema, "SELECT job_id FROM {s}.enqueue('q', 't')")  # type: ignore[attr-defined]
        await until(lambda: metrics.enqueued_sql["q"] == 1, what="the SQL enqueue counted")
        assert service.events == 0 and h.parts.job_events.position == 0
    finally:
        await service.stop()
        metrics.close()
