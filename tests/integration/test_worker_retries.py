"""Nack directives, backoff, attempts and dead-letter reasons over the raw WorkerService (SPEC §3, §6).

Queues use ``retry_jitter = 0`` and a short ``retry_base`` so backoff delays are exact.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import grpc
import pytest
from support.failures import code_reason as refusal
from support.servers import ServerFactory, module_server
from support.waiting import wait_for
from support.worker import fast_queue, job_row, wire_for

from sepp.api.v1 import common_pb2 as pb
from sepp.testing import ServerProcess

BASE = 0.1  # retry_base of the test queue, seconds
#: Seconds a retried job may come after its run_at (the promotion is woken at run_at; a loaded
#: machine answers late, and an early answer is what the tests rule out exactly). Well below
#: ``WAIT``, the long poll that waits for it: one woken only when it ends is not prompt.
LATE = 3.0
WAIT = 10.0


def assert_run_at(run_at: float, before: float, after: float, delay: float) -> None:
    """``run_at`` (seconds UTC) is ``delay`` after the server's clock during the nack call,
    which ran between ``before`` and ``after`` on this same clock (1 ms for rounding)."""
    assert before + delay - 0.001 <= run_at <= after + delay + 0.001, (run_at - before, after - before, delay)


@pytest.fixture(scope="module")
def retry_server(tmp_path_factory: pytest.TempPathFactory, backend: str) -> Iterator[ServerProcess]:
    """One server for the module: every queue gets the test settings; each test uses its ``fresh_queue``."""
    yield from module_server(tmp_path_factory, backend,
                             queue_defaults=fast_queue(retry_base=BASE, retry_cap=0.3, lease_duration=5.0))


def test_retry_backs_off_exponentially_and_dead_letters_at_max_attempts(retry_server: ServerProcess,
                                                                        fresh_queue: str) -> None:
    with wire_for(retry_server, fresh_queue) as w:
        job_id = w.enqueue(max_attempts=4)
        late = []  # seconds each retry came after its run_at
        res = w.reserve_one()
        for attempt in range(1, 5):
            assert res.attempt == attempt and res.job.attempt == attempt
            nacked_at = time.time()
            resp = w.nack(res, "retry", message=f"boom {attempt}", detail=f"trace {attempt}")
            answered_at = time.time()
            if attempt == 4:
                assert resp.state == pb.DEAD_LETTERED
                break
            delay = min(BASE * 2 ** (attempt - 1), 0.3)  # 0.1, 0.2, 0.3 (capped)
            assert resp.state == pb.SCHEDULED
            run_at = resp.run_at.ToMicroseconds() / 1e6
            assert_run_at(run_at, nacked_at, answered_at, delay)
            # Not before its time: a Reserve answered with the job must have ended after run_at
            # (same clock; a loaded machine may take longer than the delay to get here).
            early = w.reserve()
            if early:
                assert time.time() >= run_at, "a retried job was delivered before its run_at"
                res = early[0]
            else:
                res = w.reserve_one(wait=WAIT)
            late.append(time.time() - run_at)
        assert all(0 <= x < LATE for x in late), late
        assert w.reserve(wait=0.3) == []
        row = job_row(retry_server, job_id)
        assert row is not None
        assert (row.state, row.attempt, row.reason) == ("DEAD_LETTERED", 4, "ATTEMPTS_EXHAUSTED")
        assert [(h["attempt"], h["outcome"], h["error_message"], h["error_detail"]) for h in row.history] == [
            (i, "retry" if i < 4 else "attempts_exhausted", f"boom {i}", f"trace {i}") for i in range(1, 5)]


def test_the_attempt_history_travels_with_each_delivery(retry_server: ServerProcess, fresh_queue: str) -> None:
    with wire_for(retry_server, fresh_queue) as w:
        w.enqueue(max_attempts=3)
        first = w.reserve_one(queues=(fresh_queue,))
        w.nack(first, "retry", message="first failure", detail="Traceback ...")
        second = w.reserve_one(wait=WAIT)
        assert len(second.job.attempts) == 1
        a = second.job.attempts[0]
        assert (a.attempt, a.worker_id, a.outcome, a.error_message, a.error_detail) == (
            1, "test", "retry", "first failure", "Traceback ...")
        assert a.started_at.ToMicroseconds() <= a.ended_at.ToMicroseconds()


def test_max_attempts_one_is_never_retried(retry_server: ServerProcess, fresh_queue: str) -> None:
    with wire_for(retry_server, fresh_queue) as w:
        job_id = w.enqueue(max_attempts=1)
        res = w.reserve_one()
        assert res.attempt == 1 and res.job.max_attempts == 1
        assert w.nack(res, "retry").state == pb.DEAD_LETTERED
        assert w.reserve(wait=0.3) == []
        row = job_row(retry_server, job_id)
        assert row is not None and (row.state, row.reason, row.attempt) == ("DEAD_LETTERED", "ATTEMPTS_EXHAUSTED", 1)
        # retry_after on the last attempt dead-letters too.
        other = w.enqueue(max_attempts=1)
        assert w.nack(w.reserve_one(), "retry_after", delay=0.01).state == pb.DEAD_LETTERED
        other_row = job_row(retry_server, other)
        assert other_row is not None and other_row.reason == "ATTEMPTS_EXHAUSTED"


def test_an_explicit_dead_letter_records_nack_dead_letter_and_the_reason(retry_server: ServerProcess,
                                                                         fresh_queue: str) -> None:
    with wire_for(retry_server, fresh_queue) as w:
        job_id = w.enqueue(max_attempts=10)
        resp = w.nack(w.reserve_one(), "dead_letter", reason="payload is garbage", message="bad input")
        assert resp.state == pb.DEAD_LETTERED
        row = job_row(retry_server, job_id)
        assert row is not None
        assert (row.state, row.attempt, row.reason) == ("DEAD_LETTERED", 1, "NACK_DEAD_LETTER: payload is garbage")
        assert row.history[-1]["outcome"] == "dead_letter" and row.history[-1]["error_message"] == "bad input"
        assert w.reserve(wait=0.2) == []


def test_retry_after_uses_exactly_the_given_delay(retry_server: ServerProcess, fresh_queue: str) -> None:
    with wire_for(retry_server, fresh_queue) as w:
        job_id = w.enqueue(max_attempts=5)
        res = w.reserve_one()
        nacked_at = time.time()
        resp = w.nack(res, "retry_after", delay=0.5, message="try later")
        answered_at = time.time()
        assert resp.state == pb.SCHEDULED
        run_at = resp.run_at.ToMicroseconds() / 1e6
        assert_run_at(run_at, nacked_at, answered_at, 0.5)
        early = w.reserve(wait=max(0.0, run_at - 0.1 - time.time()))
        assert early == [] or time.time() >= run_at, "a retried job was delivered before its run_at"
        res = early[0] if early else w.reserve_one(wait=WAIT)
        assert res.job.id == job_id and res.attempt == 2
        assert 0 <= time.time() - run_at < LATE
        # A zero delay makes it READY at once.
        assert w.nack(res, "retry_after", delay=0.0).state == pb.READY
        assert w.reserve_one(wait=0).attempt == 3


def test_retry_after_refuses_a_negative_delay(retry_server: ServerProcess, fresh_queue: str) -> None:
    with wire_for(retry_server, fresh_queue) as w:
        w.enqueue()
        res = w.reserve_one()
        code, _ = refusal(lambda: w.nack(res, "retry_after", delay=-1.0))
        assert code == grpc.StatusCode.INVALID_ARGUMENT
        w.ack(res)  # the lease still holds


def test_release_gives_the_attempt_back_and_keeps_the_jobs_place(retry_server: ServerProcess, fresh_queue: str) -> None:
    with wire_for(retry_server, fresh_queue) as w:
        first = w.enqueue(max_attempts=1)
        second = w.enqueue(max_attempts=1)
        res = w.reserve_one()
        assert res.job.id == first and res.attempt == 1
        for _ in range(3):  # releasing over and over never spends the only attempt
            resp = w.nack(res, "release")
            assert resp.state == pb.READY
            res = w.reserve_one(wait=0)
            assert res.job.id == first, "a released job goes back to its place, ahead of later jobs"
            assert res.attempt == 1
        assert [a.outcome for a in res.job.attempts] == ["released"] * 3
        w.ack(res)
        assert w.reserve_one(wait=0).job.id == second


def test_a_nack_without_directive_is_a_plain_retry(retry_server: ServerProcess, fresh_queue: str) -> None:
    from sepp.api.v1 import worker_pb2 as wpb

    with wire_for(retry_server, fresh_queue) as w:
        w.enqueue(max_attempts=2)
        res = w.reserve_one()
        resp = w.worker.Nack(wpb.NackRequest(job_id=res.job.id, lease_id=res.lease_id), timeout=5)
        assert resp.state == pb.SCHEDULED
        assert w.reserve_one(wait=WAIT).attempt == 2


def test_retention_deletes_finished_jobs_and_expired_idempotency_keys(server_factory: ServerFactory) -> None:
    # The exact boundaries (kept until the retention, pruned at it; a key dedups until the end
    # of its window) are the engine tests' (tests/engine/test_engine_retention.py, fake clock).
    # Over the wire this checks that a running server's sweep prunes and expires at all, with
    # windows a loaded machine cannot overrun between two consecutive calls.
    server = server_factory(queues={"q": fast_queue(completed_retention=0.3, dead_letter_retention=0.3,
                                                    dedup_window=2.0)})
    with wire_for(server) as w:
        done = w.enqueue()
        w.ack(w.reserve_one())  # the ack found the row: it existed
        dead = w.enqueue(max_attempts=1)
        w.nack(w.reserve_one(), "retry")
        keyed = w.enqueue(idempotency_key="k1")
        assert w.enqueue(idempotency_key="k1") == keyed  # deduplicated within the window
        wait_for(lambda: job_row(server, done) is None and job_row(server, dead) is None, timeout=15.0,
                 what="retention to delete finished jobs")
        # The key's window passed: the same key creates a new job now.
        wait_for(lambda: w.enqueue(idempotency_key="k1") != keyed, timeout=15.0, what="the key to expire")
        # A READY job is never pruned.
        assert job_row(server, keyed) is not None
