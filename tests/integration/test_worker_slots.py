"""The Worker runtime's handler slots against a real server.

Handlers run in at most ``concurrency`` long-lived slot tasks, not one task per job; a
handler's first step runs inline, so one that never suspends is done without a task switch,
and one that suspends hands the jobs still waiting to another slot. These tests pin that
both kinds settle as before, that the concurrency limit, ``asyncio.current_task()``,
``asyncio.timeout`` and shutdown cancellation behave as with a task per job, and that a
cancellation one job leaves on its slot never reaches the next job.
"""

from __future__ import annotations

import asyncio
import contextvars
import time
from collections import Counter
from collections.abc import Iterator

import pytest
from support.servers import module_server
from support.worker import count_states, fast_queue, job_row, make_worker, running, until, wire_for

from sepp.api.v1 import common_pb2 as pb
from sepp.testing import ServerProcess
from sepp.worker import Job, Retry

pytestmark = pytest.mark.timeout(60)


@pytest.fixture(scope="module")
def fast(tmp_path_factory: pytest.TempPathFactory, backend: str) -> Iterator[ServerProcess]:
    """One server for the module: a 2 s lease, a short backoff; each test has its ``fresh_queue``."""
    yield from module_server(tmp_path_factory, backend, queue_defaults=fast_queue(lease_duration=2.0))


def enqueue(server: ServerProcess, queue: str, types: list[str]) -> list[str]:
    with wire_for(server, queue) as w:
        return list(w.enqueue_many([pb.EnqueueRequest(queue=queue, job_type=t) for t in types]))


async def test_handlers_that_suspend_and_ones_that_do_not_all_settle(fast: ServerProcess, fresh_queue: str) -> None:
    worker, reports = make_worker(fast, fresh_queue, concurrency=3, prefetch=20)

    @worker.handler("inline")
    async def inline(job: Job) -> None:
        pass  # never suspends: done in the slot's first step

    @worker.handler("inline-fail")
    async def inline_fail(job: Job) -> None:
        raise Retry("inline", after=30)

    @worker.handler("suspends")
    async def suspends(job: Job) -> str:
        await asyncio.sleep(0.01)
        await asyncio.sleep(0)
        return "done"

    @worker.handler("suspends-fail")
    async def suspends_fail(job: Job) -> None:
        await asyncio.sleep(0.01)
        try:
            raise ValueError("after a suspension")
        except ValueError as exc:
            raise Retry("suspended", after=30) from exc

    kinds = ["inline", "suspends", "inline-fail", "suspends-fail"] * 10
    ids = enqueue(fast, fresh_queue, kinds)
    async with running(worker):  # (the failures retry in 30 s: each job is reported once)
        await until(lambda: len(reports) == len(ids), what="every job settled")
    by_type = {r.job.id: r for r in reports}
    assert sorted(by_type) == sorted(ids)
    got = Counter((r.job.job_type, r.outcome, r.state) for r in reports)
    assert got == {("inline", "completed", "completed"): 10, ("suspends", "completed", "completed"): 10,
                   ("inline-fail", "retry_after", "scheduled"): 10, ("suspends-fail", "retry_after", "scheduled"): 10}
    failed = next(r for r in reports if r.job.job_type == "suspends-fail")
    assert failed.error == "suspended"
    row = job_row(fast, failed.job.id)
    assert row is not None and "after a suspension" in row.history[-1]["error_detail"]
    assert count_states(fast, fresh_queue) == {"COMPLETED": 20, "SCHEDULED": 20}


async def test_suspended_handlers_hand_the_waiting_jobs_to_other_slots(fast: ServerProcess,
                                                                       fresh_queue: str) -> None:
    """Every job of a batch starts although each handler waits (a slot stuck in one must not
    hold the others back), and never more than ``concurrency`` at once."""
    worker, reports = make_worker(fast, fresh_queue, concurrency=5, prefetch=0)
    active = peak = 0
    gate = asyncio.Event()

    @worker.handler("t")
    async def wait_for_gate(job: Job) -> None:
        nonlocal active, peak
        active += 1
        peak = max(peak, active)
        await gate.wait()
        active -= 1

    ids = enqueue(fast, fresh_queue, ["t"] * 12)
    async with running(worker):
        await until(lambda: active == 5, what="five handlers waiting at once")
        await asyncio.sleep(0.1)  # a check that nothing happens: no sixth handler starts
        assert active == 5 and peak == 5
        gate.set()
        await until(lambda: len(reports) == 12, what="12 jobs")
    assert peak == 5
    assert sorted(r.job.id for r in reports) == sorted(ids)


async def test_a_handler_sees_one_task_before_and_after_it_suspends(fast: ServerProcess, fresh_queue: str) -> None:
    worker, reports = make_worker(fast, fresh_queue, concurrency=2)
    seen: list[tuple[bool, bool]] = []

    @worker.handler("t")
    async def handler(job: Job) -> None:
        first = asyncio.current_task()
        assert first is not None
        async with asyncio.timeout(5):  # binds to the current task: must be the one that goes on
            await asyncio.sleep(0.01)
        after = asyncio.current_task()
        try:
            async with asyncio.timeout(0.02):
                await asyncio.sleep(5)
            timed_out = False
        except TimeoutError:
            timed_out = True
        seen.append((first is after, timed_out))

    enqueue(fast, fresh_queue, ["t"] * 4)
    async with running(worker):
        await until(lambda: len(reports) == 4, what="4 jobs")
    assert seen == [(True, True)] * 4
    assert {r.outcome for r in reports} == {"completed"}


#: Set by handlers in test_context_variables_are_per_job_like_a_task_per_job.
_MARK: contextvars.ContextVar[str] = contextvars.ContextVar("sepp_test_mark", default="")


async def test_context_variables_are_per_job_like_a_task_per_job(fast: ServerProcess, fresh_queue: str) -> None:
    # One slot runs every job one after another: what a job sets (before or after it
    # suspends, never reset) is its own; it still sees it after a suspension; the next job
    # of the slot starts from the slot's context, not the previous job's.
    worker, reports = make_worker(fast, fresh_queue, concurrency=1, prefetch=10)
    seen: list[tuple[str, str, str]] = []

    @worker.handler("inline")
    async def inline(job: Job) -> None:
        seen.append((job.job_type, _MARK.get(), ""))
        _MARK.set(job.id)

    @worker.handler("suspends")
    async def suspends(job: Job) -> None:
        before = _MARK.get()
        _MARK.set(job.id)
        await asyncio.sleep(0.01)
        seen.append((job.job_type, before, "same" if _MARK.get() == job.id else _MARK.get()))

    ids = enqueue(fast, fresh_queue, ["inline", "suspends", "inline", "suspends", "inline"])
    async with running(worker):
        await until(lambda: len(reports) == 5, what="5 jobs")
    assert len(ids) == 5
    assert seen == [("inline", "", ""), ("suspends", "", "same"), ("inline", "", ""), ("suspends", "", "same"),
                    ("inline", "", "")]
    assert _MARK.get() == "", "a handler's context variable leaked into the worker's own context"


async def test_a_cancellation_a_job_leaves_behind_never_reaches_the_next_job(fast: ServerProcess,
                                                                            fresh_queue: str) -> None:
    """A handler that cancels its own task and returns before the cancellation lands (as an
    ``asyncio.timeout`` expiring as its block ends can): the job completes, and the next job
    on the same slot is not cancelled by it."""
    worker, reports = make_worker(fast, fresh_queue, concurrency=1, prefetch=5)

    @worker.handler("leaves-a-cancel")
    async def leaves_a_cancel(job: Job) -> None:
        me = asyncio.current_task()
        assert me is not None
        me.cancel()

    @worker.handler("next")
    async def next_job(job: Job) -> None:
        await asyncio.sleep(0.01)

    enqueue(fast, fresh_queue, ["leaves-a-cancel", "next", "leaves-a-cancel", "next"])
    async with running(worker):
        await until(lambda: len(reports) == 4, what="4 jobs")
    assert Counter((r.job.job_type, r.outcome) for r in reports) == {("leaves-a-cancel", "completed"): 2,
                                                                     ("next", "completed"): 2}


async def test_a_suspended_handler_is_cancelled_and_released_at_shutdown(fast: ServerProcess,
                                                                        fresh_queue: str) -> None:
    """Past the grace: the suspended handler is cancelled and its job released; jobs finished
    inline on the same slot before it settled as completed."""
    worker, reports = make_worker(fast, fresh_queue, concurrency=1, prefetch=5)
    cancelled = asyncio.Event()

    @worker.handler("inline")
    async def inline(job: Job) -> None:
        pass

    @worker.handler("forever")
    async def forever(job: Job) -> None:
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            cancelled.set()
            raise

    ids = enqueue(fast, fresh_queue, ["inline", "inline", "forever"])
    task = asyncio.create_task(worker.run(install_signal_handlers=False))
    await until(lambda: len(reports) == 2 and worker.held == 1, what="the inline jobs done, forever running")
    t0 = time.monotonic()
    await asyncio.wait_for(worker.stop(0.2), 10)
    await asyncio.wait_for(task, 5)
    assert time.monotonic() - t0 < 10.0 and cancelled.is_set()  # not the handler's 60 s
    assert [r.outcome for r in reports] == ["completed", "completed", "released"]
    row = job_row(fast, ids[2])
    assert row is not None and (row.state, row.attempt) == ("READY", 0)
    assert count_states(fast, fresh_queue) == {"COMPLETED": 2, "READY": 1}
    assert not worker._pool.slots  # every slot ended with the worker


async def test_a_cancellation_that_reaches_a_handler_settles_its_job(fast: ServerProcess, fresh_queue: str) -> None:
    """A cancellation the runtime did not ask for that lands inside a handler — one its
    handler asked for itself, or one a handler before it on the same slot left to land later
    (``call_later(…, current_task().cancel)``; with a task per job it would have hit a
    finished task) — is a failure of that job like a ``CancelledError`` it raised: the job
    is settled (retried), never left RESERVED with nobody running it, and the next job runs."""
    worker, reports = make_worker(fast, fresh_queue, concurrency=1, prefetch=4)

    @worker.handler("cancels-itself")
    async def cancels_itself(job: Job) -> None:
        me = asyncio.current_task()
        assert me is not None
        me.cancel()
        await asyncio.sleep(0)

    @worker.handler("cancels-later")
    async def cancels_later(job: Job) -> None:
        me = asyncio.current_task()
        assert me is not None
        asyncio.get_running_loop().call_later(0.05, me.cancel)

    @worker.handler("slow")
    async def slow(job: Job) -> None:
        await asyncio.sleep(0.2)

    ids = enqueue(fast, fresh_queue, ["cancels-itself", "slow", "cancels-later", "slow", "slow"])
    async with running(worker):
        await until(lambda: len({r.job.id for r in reports}) == 5, what="5 jobs settled")
    first: dict[str, str] = {}
    for r in reports:
        first.setdefault(r.job.id, r.outcome)
    assert [first[i] for i in ids[:3]] == ["retry", "completed", "completed"]
    assert [first[i] for i in ids[3:]].count("completed") >= 1  # the late cancellation may reach one
    assert set(first.values()) <= {"retry", "completed"}
    await until(lambda: "RESERVED" not in count_states(fast, fresh_queue), what="nothing RESERVED", within=10)
    assert worker.held == 0
