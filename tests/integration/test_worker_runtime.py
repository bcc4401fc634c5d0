"""The Python worker runtime (``sepp.worker.Worker``) against a real server (SPEC §3).

Handlers by job type, typed ``Job`` fields, concurrency and prefetch limits, automatic
lease extension, batched settles, the outcome of each handler result, and graceful
shutdown (nothing lost, nothing run twice).
"""

from __future__ import annotations

import asyncio
import datetime as dt
import threading
import time
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
from support.servers import ServerFactory, module_server
from support.worker import count_states, fast_queue, job_row, make_worker, running, until, wire_for

from sepp.api.v1 import common_pb2 as pb
from sepp.testing import ServerProcess, free_port
from sepp.worker import DeadLetter, Job, Retry, _shutdown

pytestmark = pytest.mark.timeout(60)




@pytest.fixture(scope="module")
def fast(tmp_path_factory: pytest.TempPathFactory, backend: str) -> Iterator[ServerProcess]:
    """One server for the module's tests that need no config of their own: every queue has a
    2 s lease and a short backoff, and each test works on its ``fresh_queue``."""
    yield from module_server(tmp_path_factory, backend, queue_defaults=fast_queue(lease_duration=2.0))


async def test_a_handler_gets_every_field_of_its_job_typed(fast: ServerProcess, fresh_queue: str) -> None:
    worker, _ = make_worker(fast, fresh_queue)
    seen: list[Job] = []
    traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
    big = 2**62 + 1  # would lose precision through a float

    @worker.handler("welcome")
    async def welcome(job: Job) -> None:
        seen.append(job)

    with wire_for(fast, fresh_queue) as w:
        before = dt.datetime.now(dt.UTC)
        job_id = w.enqueue(fresh_queue, "welcome", data=b'{"user_id": 42}', priority=7, max_attempts=3,
                           idempotency_key="welcome-42", trace_context={"traceparent": traceparent},
                           custom={"n": pb.CustomValue(int_value=big), "vip": pb.CustomValue(bool_value=True),
                                   "ratio": pb.CustomValue(float_value=0.5),
                                   "locale": pb.CustomValue(string_value="en-US")})
    async with running(worker):
        await until(lambda: seen, what="the handler to run")
    job = seen[0]
    assert job.id == job_id and job.queue == fresh_queue and job.job_type == "welcome"
    assert job.payload == b'{"user_id": 42}' and job.json() == {"user_id": 42}
    assert dict(job.custom) == {"n": big, "vip": True, "ratio": 0.5, "locale": "en-US"}
    assert type(job.custom["n"]) is int and type(job.custom["vip"]) is bool and type(job.custom["ratio"]) is float
    assert (job.priority, job.attempt, job.max_attempts, job.is_last_attempt) == (7, 1, 3, False)
    assert job.idempotency_key == "welcome-42"
    assert dict(job.trace_context) == {"traceparent": traceparent}
    for when in (job.enqueued_at, job.run_at, job.lease_expires_at):
        assert when.tzinfo is not None and when.utcoffset() == dt.timedelta(0)
    assert before - dt.timedelta(seconds=1) < job.enqueued_at <= job.run_at < job.lease_expires_at
    assert job.lease_id and job.history == () and job.cancel_requested is False and job.lease_lost is False
    assert job.worker_id == worker.config.worker_id


async def test_async_handlers_run_on_the_loop_and_plain_ones_in_threads(fast: ServerProcess, fresh_queue: str) -> None:
    worker, reports = make_worker(fast, fresh_queue)
    threads: dict[str, str] = {}

    @worker.handler("async")
    async def on_loop(job: Job) -> None:
        threads["async"] = threading.current_thread().name

    def blocking(job: Job) -> None:
        time.sleep(0.05)  # blocking is fine here
        threads["plain"] = threading.current_thread().name

    worker.register("plain", blocking)
    with pytest.raises(ValueError, match="already has a handler"):
        worker.register("plain", blocking)
    with wire_for(fast, fresh_queue) as w:
        w.enqueue(fresh_queue, "async")
        w.enqueue(fresh_queue, "plain")
    async with running(worker):
        await until(lambda: len(reports) == 2, what="both jobs")
    assert threads["async"] == threading.current_thread().name
    assert threads["plain"].startswith("sepp-handler")
    assert {r.outcome for r in reports} == {"completed"} and {r.state for r in reports} == {"completed"}


async def test_no_more_than_concurrency_handlers_run_at_once(fast: ServerProcess, fresh_queue: str) -> None:
    worker, reports = make_worker(fast, fresh_queue, concurrency=4)
    active = peak = 0

    @worker.handler("t")
    async def slow(job: Job) -> None:
        nonlocal active, peak
        active += 1
        peak = max(peak, active)
        await asyncio.sleep(0.05)
        active -= 1

    with wire_for(fast, fresh_queue) as w:
        ids = w.enqueue_many([pb.EnqueueRequest(queue=fresh_queue, job_type="t") for _ in range(24)])
    async with running(worker):
        await until(lambda: len(reports) == 24, what="24 jobs")
    assert peak == 4
    assert sorted(r.job.id for r in reports) == sorted(ids)


async def test_prefetch_bounds_the_jobs_a_worker_holds(fast: ServerProcess, fresh_queue: str) -> None:
    worker, reports = make_worker(fast, fresh_queue, concurrency=2, prefetch=3)
    gate = asyncio.Event()

    @worker.handler("t")
    async def blocked(job: Job) -> None:
        await gate.wait()

    with wire_for(fast, fresh_queue) as w:
        w.enqueue_many([pb.EnqueueRequest(queue=fresh_queue, job_type="t") for _ in range(10)])
    async with running(worker):
        await until(lambda: count_states(fast, fresh_queue).get("RESERVED") == 5, what="5 jobs held")
        await asyncio.sleep(0.3)  # a check that nothing happens: no sixth job is taken meanwhile
        assert count_states(fast, fresh_queue) == {"RESERVED": 5, "READY": 5}
        assert worker.held == 5
        gate.set()
        await until(lambda: len(reports) == 10, what="all jobs")
    assert count_states(fast, fresh_queue) == {"COMPLETED": 10}


async def test_each_handler_result_settles_the_job_accordingly(server_factory: ServerFactory) -> None:
    server = server_factory(queues={"q": fast_queue(retry_base=0.1, lease_duration=2.0)})
    worker, reports = make_worker(server)
    retry_after_attempts: list[float] = []

    @worker.handler("ok")
    async def ok(job: Job) -> str:
        return "ignored"

    @worker.handler("boom")
    async def boom(job: Job) -> None:
        raise ValueError(f"boom {job.attempt}")

    @worker.handler("later")
    async def later(job: Job) -> None:
        retry_after_attempts.append(time.monotonic())
        if job.attempt == 1:
            raise Retry("not yet", after=0.4)

    @worker.handler("give-up")
    def give_up(job: Job) -> None:
        raise DeadLetter("payload is garbage")

    with wire_for(server) as w:
        ids = {t: w.enqueue("q", t, max_attempts=2) for t in ("ok", "boom", "later", "give-up", "nobody")}
    async with running(worker):
        await until(lambda: len(reports) == 7, what="7 outcomes")
    rows = {t: job_row(server, i) for t, i in ids.items()}
    assert all(r is not None for r in rows.values())
    ok_row, boom_row, later_row, dead_row, nobody_row = (rows[t] for t in ("ok", "boom", "later", "give-up",
                                                                            "nobody"))
    assert ok_row is not None and ok_row.state == "COMPLETED"
    assert boom_row is not None and (boom_row.state, boom_row.reason, boom_row.attempt) == (
        "DEAD_LETTERED", "ATTEMPTS_EXHAUSTED", 2)
    assert [h["error_message"] for h in boom_row.history] == ["ValueError: boom 1", "ValueError: boom 2"]
    assert "Traceback" in boom_row.history[0]["error_detail"] and "boom 1" in boom_row.history[0]["error_detail"]
    assert later_row is not None and later_row.state == "COMPLETED" and later_row.attempt == 2
    # Not before the 0.4 s it asked for (the queue's backoff would give 0.1 s); later only by load.
    assert 0.4 - 0.01 <= retry_after_attempts[1] - retry_after_attempts[0] < 5.0
    assert later_row.history[0]["outcome"] == "retry_after" and later_row.history[0]["error_message"] == "not yet"
    assert dead_row is not None and (dead_row.state, dead_row.reason) == (
        "DEAD_LETTERED", "NACK_DEAD_LETTER: payload is garbage")
    assert nobody_row is not None and (nobody_row.state, nobody_row.reason) == (
        "DEAD_LETTERED", "NACK_DEAD_LETTER: no handler registered for job type 'nobody'")
    by_type = Counter((r.job.job_type, r.outcome, r.state) for r in reports)
    assert by_type == Counter({("ok", "completed", "completed"): 1, ("boom", "retry", "scheduled"): 1,
                               ("boom", "retry", "dead_lettered"): 1, ("later", "retry_after", "scheduled"): 1,
                               ("later", "completed", "completed"): 1, ("give-up", "dead_letter", "dead_lettered"): 1,
                               ("nobody", "dead_letter", "dead_lettered"): 1})
    assert worker.stats["completed"] == 2 and worker.stats["refused"] == 0


async def test_a_long_handler_keeps_its_lease_alive(server_factory: ServerFactory) -> None:
    # Extended every third of the 1 s lease: a stall of up to 2/3 s between two extensions
    # (a loaded machine) still keeps it.
    server = server_factory(queues={"q": fast_queue(lease_duration=1.0)})
    worker, reports = make_worker(server)
    starts: list[int] = []

    @worker.handler("t")
    async def long(job: Job) -> None:
        starts.append(job.attempt)
        await asyncio.sleep(3.0)  # three leases long

    with wire_for(server) as w:
        job_id = w.enqueue("q", "t")
    async with running(worker):
        await until(lambda: reports, what="the long job")
    assert starts == [1]
    assert reports[0].outcome == "completed" and reports[0].state == "completed"
    row = job_row(server, job_id)
    assert row is not None and (row.state, row.attempt) == ("COMPLETED", 1)
    assert [h["outcome"] for h in row.history] == ["completed"]


async def test_an_explicit_lease_duration_is_used_and_kept_alive(fast: ServerProcess, fresh_queue: str) -> None:
    # The worker's 0.75 s lease, not the queue's 2 s one: granted after the worker started and
    # before the handler ran, so its expiry lies between those two moments plus 0.75 s.
    lease = dt.timedelta(seconds=0.75)
    worker, reports = make_worker(fast, fresh_queue, lease_duration=lease.total_seconds())
    seen: list[tuple[dt.datetime, dt.datetime]] = []

    @worker.handler("t")
    def long(job: Job) -> None:
        seen.append((job.lease_expires_at, dt.datetime.now(dt.UTC)))
        time.sleep(2.0)  # well past the first lease: kept alive by extensions

    with wire_for(fast, fresh_queue) as w:
        w.enqueue(fresh_queue, "t")
    started = dt.datetime.now(dt.UTC)
    async with running(worker):
        await until(lambda: reports, what="the job")
    expires, handler_ran = seen[0]
    assert started + lease - dt.timedelta(milliseconds=1) <= expires <= handler_ran + lease
    assert reports[0].state == "completed" and not reports[0].job.lease_lost


async def test_jobs_reserved_together_keep_their_leases_when_some_finish_early(fast: ServerProcess,
                                                                               fresh_queue: str) -> None:
    # Six jobs in one reservation share their first extension timer (LeaseKeeper.track_all):
    # the three quick ones finishing early must not stop the three slow ones being extended
    # for over three leases' worth of running. (A 1.2 s lease leaves 0.8 s of slack per
    # extension for a stalled loop or a slow call: with 0.3 s, a loaded CI machine's stall
    # lost one.)
    worker, reports = make_worker(fast, fresh_queue, lease_duration=1.2, concurrency=6, prefetch=0)

    @worker.handler("t")
    async def work(job: Job) -> None:
        await asyncio.sleep(4.0 if job.custom["slow"] else 0.01)

    with wire_for(fast, fresh_queue) as w:
        w.enqueue_many([pb.EnqueueRequest(queue=fresh_queue, job_type="t",
                                          custom={"slow": pb.CustomValue(bool_value=i % 2 == 0)})
                        for i in range(6)])
    async with running(worker):
        await until(lambda: len(reports) == 6, what="six jobs")
        assert worker._keeper.extensions >= 3 * 3
    assert sorted(r.state for r in reports) == ["completed"] * 6
    assert all(not r.job.lease_lost for r in reports)
    assert count_states(fast, fresh_queue) == {"COMPLETED": 6}


async def test_jobs_finishing_together_share_settle_calls(fast: ServerProcess, fresh_queue: str) -> None:
    worker, reports = make_worker(fast, fresh_queue, concurrency=128, prefetch=128)

    @worker.handler("t")
    async def noop(job: Job) -> None:
        return None

    with wire_for(fast, fresh_queue) as w:
        for _ in range(4):
            w.enqueue_many([pb.EnqueueRequest(queue=fresh_queue, job_type="t") for _ in range(128)])
    async with running(worker):
        await until(lambda: len(reports) == 512, what="512 jobs")
        settler = worker._settler
        assert settler.items == 512
        assert settler.calls <= 512 / 4, f"{settler.calls} Settle calls for 512 jobs"
    assert count_states(fast, fresh_queue) == {"COMPLETED": 512}


async def test_graceful_stop_finishes_running_jobs_and_releases_prefetched_ones(fast: ServerProcess,
                                                                                fresh_queue: str) -> None:
    worker, reports = make_worker(fast, fresh_queue, concurrency=2, prefetch=4)
    started: Counter[str] = Counter()

    @worker.handler("t")
    async def slow(job: Job) -> None:
        started[job.id] += 1
        await asyncio.sleep(0.5)

    with wire_for(fast, fresh_queue) as w:
        ids = w.enqueue_many([pb.EnqueueRequest(queue=fresh_queue, job_type="t") for _ in range(10)])
    task = asyncio.create_task(worker.run(install_signal_handlers=False))
    await until(lambda: len(started) == 2 and worker.held == 6, what="2 running + 4 prefetched")
    t0 = time.monotonic()
    await worker.stop(10.0)
    await asyncio.wait_for(task, 5)
    assert time.monotonic() - t0 < 5.0  # well within the grace: waited for the running pair only
    assert not worker.running
    assert count_states(fast, fresh_queue) == {"COMPLETED": 2, "READY": 8}
    assert max(started.values()) == 1
    released = [r for r in reports if r.outcome == "released"]
    assert len(released) == 4 and all(r.state == "ready" and r.duration == 0 for r in released)
    for job_id in ids:
        row = job_row(fast, job_id)
        assert row is not None
        if job_id in started:
            assert (row.state, row.attempt) == ("COMPLETED", 1)
        else:  # released jobs got their attempt back; nobody else was ever reserved
            assert (row.state, row.attempt) == ("READY", 0)
    # A second worker gets all eight, in enqueue order (released ones kept their place), each once.
    with wire_for(fast, fresh_queue) as w:
        rest = w.reserve(max_jobs=10)
    assert [r.job.id for r in rest] == [i for i in ids if i not in started]
    assert {r.attempt for r in rest} == {1}


async def test_a_handler_past_the_grace_period_is_released_not_lost(fast: ServerProcess, fresh_queue: str) -> None:
    worker, reports = make_worker(fast, fresh_queue, concurrency=2)
    entered = asyncio.Event()

    @worker.handler("async")
    async def forever(job: Job) -> None:
        entered.set()
        await asyncio.sleep(60)

    unstuck = threading.Event()

    def stuck(job: Job) -> None:
        unstuck.wait(30)  # until the test has seen the stop end without it

    worker.register("thread", stuck)
    with wire_for(fast, fresh_queue) as w:
        a = w.enqueue(fresh_queue, "async")
        b = w.enqueue(fresh_queue, "thread")
    task = asyncio.create_task(worker.run(install_signal_handlers=False))
    await until(lambda: worker.held == 2 and entered.is_set(), what="both jobs running")
    t0 = time.monotonic()
    try:
        await asyncio.wait_for(worker.stop(0.3), 10)
        await asyncio.wait_for(task, 5)
    finally:
        unstuck.set()
    assert time.monotonic() - t0 < 10.0  # neither handler ends by itself before the test lets it
    assert sorted(r.outcome for r in reports) == ["released", "released"]
    for job_id in (a, b):
        row = job_row(fast, job_id)
        assert row is not None and (row.state, row.attempt) == ("READY", 0)
        assert row.history[-1]["outcome"] == "released"


async def test_a_second_stop_with_zero_grace_hurries_the_first(fast: ServerProcess, fresh_queue: str) -> None:
    worker, reports = make_worker(fast, fresh_queue)

    @worker.handler("t")
    async def forever(job: Job) -> None:
        await asyncio.sleep(60)

    with wire_for(fast, fresh_queue) as w:
        w.enqueue(fresh_queue, "t")
    task = asyncio.create_task(worker.run(install_signal_handlers=False))
    await until(lambda: worker.held == 1, what="the job to start")
    first = asyncio.create_task(worker.stop(30))
    await asyncio.sleep(0.2)  # a check that nothing happens: the first stop waits for the handler
    assert not first.done()
    t0 = time.monotonic()
    await worker.stop(0)
    await asyncio.wait_for(first, 10)
    await asyncio.wait_for(task, 5)
    assert time.monotonic() - t0 < 10.0  # a third of the first stop's 30 s grace
    assert [r.outcome for r in reports] == ["released"]
    assert [r.refused for r in reports] == [""], "a hurried stop still delivers its releases to a live server"


async def test_stop_while_long_polling_returns_promptly_and_leaves_nothing_reserved(fast: ServerProcess,
                                                                                    fresh_queue: str) -> None:
    worker, _ = make_worker(fast, fresh_queue, poll_wait=20.0)
    worker.register("t", lambda job: None)
    task = asyncio.create_task(worker.run(install_signal_handlers=False))
    await until(lambda: "_reserver" in vars(worker) and worker._reserver.calls, what="the first Reserve to be sent")
    await asyncio.sleep(0.3)  # the reserver is parked in a 20 s long-poll
    t0 = time.monotonic()
    await worker.stop()
    await asyncio.wait_for(task, 10)
    assert time.monotonic() - t0 < 10.0  # half the long poll: it was ended, not waited out
    # The parked call was ended by StopReserving and answered (empty), not cancelled.
    assert worker.stats["reserve_calls"] == 1
    with wire_for(fast, fresh_queue) as w:
        job_id = w.enqueue(fresh_queue, "t")
        assert w.reserve_one(wait=5.0).job.id == job_id


async def test_a_worker_rides_out_a_server_restart(server_factory: ServerFactory) -> None:
    # A fixed port, so the restarted server is where the worker's channel points.
    # The lease (20 s) outlasts the restart (2-6 s on a loaded 2-core machine), during which
    # it cannot be extended.
    server = server_factory(queues={"q": fast_queue(lease_duration=20.0)}, grpc_listen=f"127.0.0.1:{free_port()}")
    worker, reports = make_worker(server)
    gate = asyncio.Event()

    @worker.handler("t")
    async def handler(job: Job) -> None:
        if job.custom.get("wait_for_restart"):
            await gate.wait()

    with wire_for(server) as w:
        first = w.enqueue("q", "t", custom={"wait_for_restart": pb.CustomValue(bool_value=True)})
    async with running(worker):
        await until(lambda: worker.held == 1, what="the first job to start")
        await asyncio.to_thread(server.restart)  # graceful stop, then start on the same data and port
        gate.set()  # the job ends after the restart: its lease (durable) still settles it
        await until(lambda: reports, within=30, what="the first job to settle after the restart")
        with wire_for(server) as w:
            second = w.enqueue("q", "t")
        await until(lambda: len(reports) == 2, within=30, what="a job enqueued after the restart")
    assert [(r.job.id, r.state, r.refused) for r in reports] == [(first, "completed", ""), (second, "completed", "")]
    row = job_row(server, first)
    assert row is not None and (row.state, row.attempt) == ("COMPLETED", 1)


async def test_an_admin_cancel_reaches_the_running_handler(server_factory: ServerFactory) -> None:
    server = server_factory(queues={"q": fast_queue(lease_duration=1.5)})
    worker, reports = make_worker(server)
    noticed: list[float] = []

    @worker.handler("t")
    async def cooperative(job: Job) -> None:
        while not job.cancel_requested:  # noqa: ASYNC110 - a handler polls the flag between steps
            await asyncio.sleep(0.01)
        noticed.append(time.monotonic())
        raise RuntimeError("stopped on request")  # a nack: the server makes the job CANCELLED

    with wire_for(server) as w:
        job_id = w.enqueue("q", "t", max_attempts=5)
        async with running(worker):
            await until(lambda: worker.held == 1, what="the job to start")
            cancelled_at = time.monotonic()
            job = await asyncio.to_thread(w.cancel, job_id, "no longer needed")
            assert job.state == pb.RESERVED and job.cancel_requested
            await until(lambda: reports, what="the handler to stop")
        final = w.get_job(job_id)
    # Seen at the next extension (every lease/3 = 0.5 s) on a quiet machine; without the extension's
    # cancel flag the handler would never stop (the wait above would time out). Bounded loosely: load.
    assert noticed[0] - cancelled_at < 6.0
    assert reports[0].outcome == "retry" and reports[0].state == "cancelled"
    assert final.state == pb.CANCELLED and final.attempt == 1


async def test_handlers_raising_base_exceptions_are_failures_not_crashes(server_factory: ServerFactory) -> None:
    server = server_factory(queues={"q": fast_queue(lease_duration=2.0)})
    worker, reports = make_worker(server)

    @worker.handler("cancelled")
    async def cancelled(job: Job) -> None:
        raise asyncio.CancelledError()

    @worker.handler("interrupt")
    async def interrupt(job: Job) -> None:
        raise KeyboardInterrupt("from the handler")

    @worker.handler("exit")
    def exit_in_thread(job: Job) -> None:
        raise SystemExit(3)

    with wire_for(server) as w:
        ids = {t: w.enqueue("q", t, max_attempts=1) for t in ("cancelled", "interrupt", "exit")}
    async with running(worker):
        await until(lambda: len(reports) == 3, what="3 outcomes")
    for job_type, job_id in ids.items():
        row = job_row(server, job_id)
        assert row is not None and (row.state, row.reason) == ("DEAD_LETTERED", "ATTEMPTS_EXHAUSTED"), job_type


async def test_a_handler_that_swallows_cancellation_still_gets_its_job_released(
        fast: ServerProcess, fresh_queue: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_shutdown, "CANCEL_WAIT", 0.5)  # the mechanism, not the 5 s value
    worker, _reports = make_worker(fast, fresh_queue)
    entered = asyncio.Event()
    handler_tasks: list[asyncio.Task[Any]] = []
    let_go = False

    @worker.handler("stubborn")
    async def stubborn(job: Job) -> None:
        entered.set()
        me = asyncio.current_task()
        assert me is not None
        handler_tasks.append(me)
        while not let_go:
            try:
                await asyncio.sleep(60)
            except asyncio.CancelledError:
                pass

    with wire_for(fast, fresh_queue) as w:
        job_id = w.enqueue(fresh_queue, "stubborn")
    task = asyncio.create_task(worker.run(install_signal_handlers=False))
    await until(entered.is_set, what="handler running")
    await worker.stop(0.2)
    await asyncio.wait_for(task, 15)
    row = job_row(fast, job_id)
    assert row is not None and (row.state, row.attempt) == ("READY", 0)
    let_go = True  # end the stubborn handler so the test's event loop can close
    for t in handler_tasks:
        t.cancel()
    await asyncio.wait(handler_tasks, timeout=5)
