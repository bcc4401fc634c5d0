"""Live job events and progress at the engine, on every backend: the event each transition
emits (enqueued, promoted, reserved, progress, completed, retry scheduled, dead-lettered,
requeued), the filters, the cut-off of a watcher that falls behind its buffer, nothing
built while nobody watches, and progress — stored with the lease extension, at the 4 KiB
limit and one past it, refused with a stale lease (docs/decisions.md "Progress and live
job events")."""

from __future__ import annotations

import json

import pytest

from engine.engine_kit import Harness, HarnessFactory, S
from sepp.api.v1 import worker_pb2 as wpb
from sepp.domain.ids import job_id_text
from sepp.domain.states import State
from sepp.server import job_events as ev
from sepp.server.errors import InvalidRequest, LeaseRefused
from sepp.server.job_events import JobEvent, Watcher
from sepp.server.rpc.worker import settle_params


def kinds(w: Watcher) -> list[tuple[int, str, int]]:
    """(kind, queue, state) of each buffered event, taken."""
    return [(e.kind, e.queue, e.state) for e in w.take()]


async def test_each_transition_emits_one_event_with_position_node_and_fields(harness: Harness) -> None:
    hub = harness.parts.job_events
    w = hub.watch()
    job_id, _ = await harness.enqueue("q")
    [e] = w.take()
    assert (e.kind, e.job_id, e.queue, e.job_type, e.state, e.attempt) == (ev.ENQUEUED, job_id, "q", "t",
                                                                          int(State.READY), 0)
    assert e.node == harness.parts.node and e.at == harness.now and e.run_at == harness.now and e.position == 1

    [job] = await harness.reserve("q")
    [e] = w.take()
    assert (e.kind, e.state, e.attempt, e.worker_id, e.position) == (ev.RESERVED, int(State.RESERVED), 1, "w", 2)

    await harness.nack(job, retry_after_s=30, message="boom")
    [e] = w.take()
    assert (e.kind, e.state, e.attempt, e.error) == (ev.RETRY_SCHEDULED, int(State.SCHEDULED), 1, "boom")
    assert e.run_at == harness.now + 30 * S

    harness.clock.advance(31)
    await harness.sweeper.promote_once()
    [e] = w.take()
    assert (e.kind, e.job_id, e.state, e.attempt) == (ev.PROMOTED, job_id, int(State.READY), 1)

    [job] = await harness.reserve("q")
    await harness.nack(job, release=True)
    assert kinds(w) == [(ev.RESERVED, "q", int(State.RESERVED)), (ev.REQUEUED, "q", int(State.READY))]

    [job] = await harness.reserve("q")
    await harness.ack(job)
    got = w.take()
    assert [e.kind for e in got] == [ev.RESERVED, ev.COMPLETED]
    assert (got[1].state, got[1].attempt, got[1].result_bytes) == (int(State.COMPLETED), 2, 0)
    await harness.ack(job)  # a repeated ack changes nothing and reports nothing
    assert w.take() == []
    assert [e.position for e in got] == sorted(e.position for e in got)


async def test_dead_letters_and_a_lease_that_runs_out_are_reported(harness: Harness) -> None:
    w = harness.parts.job_events.watch()
    await harness.enqueue("q", max_attempts=2)
    [job] = await harness.reserve("q", lease_s=5)
    harness.clock.advance(6)
    await harness.sweeper.reclaim_once()
    assert kinds(w)[-1] == (ev.REQUEUED, "q", int(State.READY))
    [job] = await harness.reserve("q", lease_s=5)
    await harness.nack(job, dead_letter="poison", message="bad input")
    got = w.take()
    assert (got[-1].kind, got[-1].state, got[-1].reason, got[-1].error) == (
        ev.DEAD_LETTERED, int(State.DEAD_LETTERED), "NACK_DEAD_LETTER: poison", "bad input")

    await harness.enqueue("q", max_attempts=1)
    [job] = await harness.reserve("q", lease_s=5)
    harness.clock.advance(6)
    await harness.sweeper.reclaim_once()
    last = w.take()[-1]
    assert (last.kind, last.reason, last.attempt) == (ev.DEAD_LETTERED, "LEASE_EXPIRED", 1)


async def test_a_scheduled_enqueue_says_when_it_runs(harness: Harness) -> None:
    w = harness.parts.job_events.watch()
    await harness.enqueue("q", at_us=harness.now + 60 * S)
    [e] = w.take()
    assert (e.kind, e.state, e.run_at) == (ev.ENQUEUED, int(State.SCHEDULED), harness.now + 60 * S)
    await harness.enqueue("q", key="k")
    await harness.enqueue("q", key="k")  # deduplicated: nothing stored, nothing reported
    assert len(w.take()) == 1


async def test_filters_select_by_job_id_queue_and_type_together(harness: Harness) -> None:
    hub = harness.parts.job_events
    first, _ = await harness.enqueue("a")
    by_queue = hub.watch(queues=["b"])
    by_id = hub.watch(job_ids=[first])
    by_type = hub.watch(job_types=["other"])
    both = hub.watch(queues=["a"], job_types=["t"])
    none = hub.watch(queues=["a"], job_types=["other"])
    await harness.enqueue("b")
    [job] = await harness.reserve("a")
    assert job.id == first
    assert kinds(by_queue) == [(ev.ENQUEUED, "b", int(State.READY))]
    assert [e.job_id for e in by_id.take()] == [first]
    assert by_type.take() == [] and none.take() == []
    assert [e.kind for e in both.take()] == [ev.RESERVED]


async def test_nothing_is_built_while_nobody_watches(harness: Harness) -> None:
    hub = harness.parts.job_events
    assert not hub.active
    await harness.enqueue("q")
    [job] = await harness.reserve("q")
    await harness.ack(job)
    assert hub.position == 0
    w = hub.watch()
    assert hub.active
    hub.unwatch(w)
    assert not hub.active


async def test_a_watcher_that_falls_behind_its_buffer_is_cut_off_with_the_count(
        make_harness: HarnessFactory) -> None:
    harness = await make_harness(watch_buffer=3)
    hub = harness.parts.job_events
    slow, other = hub.watch(), hub.watch(queues=["elsewhere"])
    for _ in range(3):
        await harness.enqueue("q")
    assert len(slow.pending) == 3 and slow.behind == 0  # at the limit: kept
    await harness.enqueue("q")
    assert slow.behind == 4 and slow.pending == []  # one past it: cut off, the count kept
    await harness.enqueue("q")
    assert slow.behind == 5
    assert other.behind == 0 and other.pending == []


async def test_progress_is_stored_with_the_extension_and_reported(harness: Harness) -> None:
    w = harness.parts.job_events.watch()
    job_id, _ = await harness.enqueue("q")
    [job] = await harness.reserve("q")
    w.take()
    value = json.dumps({"done": 42, "total": 100})
    await harness.engine.extend(job.id, job.lease_id or b"", 30.0, value)
    [e] = w.take()
    assert (e.kind, e.job_id, e.queue, e.job_type, e.state, e.attempt, e.progress) == (
        ev.PROGRESS, job_id, "q", "t", int(State.RESERVED), 1, value)
    assert (await harness.job(job_id)).progress == value
    await harness.engine.extend(job.id, job.lease_id or b"", 30.0)  # a plain extension keeps it
    assert (await harness.job(job_id)).progress == value


async def test_progress_of_4096_bytes_is_kept_and_4097_refused(harness: Harness) -> None:
    job_id, _ = await harness.enqueue("q")
    [job] = await harness.reserve("q")
    at_limit = json.dumps("x" * 4094)  # 4,096 bytes with its quotes
    assert len(at_limit) == 4096
    await harness.engine.extend(job.id, job.lease_id or b"", 30.0, at_limit)
    assert (await harness.job(job_id)).progress == at_limit
    past = json.dumps("é" * 2047 + "x", ensure_ascii=False)  # 4,097 bytes of UTF-8
    assert len(past.encode()) == 4097
    with pytest.raises(InvalidRequest) as info:
        await harness.engine.extend(job.id, job.lease_id or b"", 30.0, past)
    assert (info.value.field, info.value.limit, info.value.actual) == ("progress", 4096, 4097)
    with pytest.raises(InvalidRequest, match="JSON"):
        await harness.engine.extend(job.id, job.lease_id or b"", 30.0, "{not json")
    assert (await harness.job(job_id)).progress == at_limit


async def test_progress_with_a_stale_lease_is_refused_and_not_stored(harness: Harness) -> None:
    w = harness.parts.job_events.watch()
    job_id, _ = await harness.enqueue("q")
    [old] = await harness.reserve("q", lease_s=5)
    harness.clock.advance(6)
    await harness.sweeper.reclaim_once()
    [new] = await harness.reserve("q", lease_s=30)
    await harness.engine.extend(new.id, new.lease_id or b"", 30.0, "0.5")
    w.take()
    with pytest.raises(LeaseRefused) as info:
        await harness.engine.extend(old.id, old.lease_id or b"", 30.0, "0.9")
    assert info.value.error.value == "LEASE_MISMATCH"
    assert (await harness.job(job_id)).progress == "0.5"
    assert w.take() == []
    await harness.ack(new)
    with pytest.raises(LeaseRefused):  # settled: the lease is gone for progress too
        await harness.engine.extend(new.id, new.lease_id or b"", 30.0, "1.0")
    assert (await harness.job(job_id)).progress == "0.5"


async def test_a_jobs_event_times_never_go_back(harness: Harness) -> None:
    """A new user's report: ``sepp jobs watch`` printed a progress event with a later time
    than the completion after it. The ack reached the server first (stamped then) and waited
    for its commit while the extension with the last progress, received 2 ms later, committed
    before it (PostgreSQL's committers run side by side). The completion is now shown at no
    earlier time than the progress before it; the stored ``finished_at`` is the ack's."""
    w = harness.parts.job_events.watch()
    job_id, _ = await harness.enqueue("q")
    [job] = await harness.reserve("q")
    w.take()
    received = harness.now
    ack = settle_params(wpb.AckRequest(job_id=job_id_text(job.id), lease_id=job_id_text(job.lease_id or b"")),
                        received, 16 * 1024)
    harness.clock.advance(us=2_000)
    await harness.engine.extend(job.id, job.lease_id or b"", 30.0, '"99%"')
    harness.clock.advance(us=1_000)
    await harness.engine.settle([ack])
    progress, completed = w.take()
    assert (progress.kind, completed.kind) == (ev.PROGRESS, ev.COMPLETED)
    assert progress.at == received + 2_000  # when the extension was received
    assert completed.at == progress.at  # not received (2 ms before the progress shown above it)
    assert (await harness.job(job_id)).finished_at == received
    # The next job's events are stamped as they come again: the entry ended with the completion.
    job_id, _ = await harness.enqueue("q")
    [job] = await harness.reserve("q")
    await harness.engine.extend(job.id, job.lease_id or b"", 30.0, "0.5")
    await harness.ack(job)
    assert [(e.kind, e.at) for e in w.take()] == [(ev.ENQUEUED, harness.now), (ev.RESERVED, harness.now),
                                                 (ev.PROGRESS, harness.now), (ev.COMPLETED, harness.now)]
    assert harness.parts.job_events._progress_at == {}


def test_a_watcher_keeps_events_in_position_order() -> None:
    w = Watcher(limit=10)
    for n in (1, 2, 3):
        w.offer(JobEvent(n, ev.ENQUEUED, b"\0" * 16, "q", "t", 2, 0, 0))
    assert [e.position for e in w.take()] == [1, 2, 3]
    assert job_id_text(b"\0" * 16) == "00000000-0000-0000-0000-000000000000"


async def test_an_admin_cancel_and_requeue_are_reported(harness: Harness) -> None:
    from sepp.server.admin.jobs import JobAdmin

    admin = JobAdmin(harness.parts, harness.store.admin, lambda: None)
    w = harness.parts.job_events.watch()
    job_id, _ = await harness.enqueue("q")
    await admin.cancel(job_id_text(job_id), "not needed")
    [_, cancelled] = w.take()
    assert (cancelled.kind, cancelled.state, cancelled.reason) == (ev.CANCELLED, int(State.CANCELLED), "not needed")
    await admin.requeue(job_id_text(job_id))
    [requeued] = w.take()
    assert (requeued.kind, requeued.state, requeued.reason, requeued.job_id) == (
        ev.REQUEUED, int(State.READY), "requeued", job_id)
