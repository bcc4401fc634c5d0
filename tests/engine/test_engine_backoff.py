"""Retry timing through the real engine with a fake clock (SPEC §3): the exact run_at of
each backoff retry, jitter within its bounds, ``retry_after``, dead-letter at max_attempts —
checked to the µs, without sleeping. (The process-level equivalents in
tests/integration/test_worker_retries.py wait in real time.)
"""

from __future__ import annotations

import json

import pytest

from engine.engine_kit import Harness, HarnessFactory, S
from sepp.domain.params import SettleError
from sepp.domain.states import State
from sepp.server.errors import InvalidRequest, LeaseRefused


async def test_each_backoff_retry_runs_at_base_times_two_to_the_attempt_capped(make_harness: HarnessFactory) -> None:
    h = await make_harness(queues={"q": {"retry_base": 2.0, "retry_cap": 20.0, "retry_jitter": 0.0,
                                         "default_max_attempts": 6}})
    job_id, _ = await h.enqueue()
    expected = [2 * S, 4 * S, 8 * S, 16 * S, 20 * S]
    for attempt, delay in enumerate(expected, start=1):
        (job,) = await h.reserve()
        assert (job.id, job.attempt) == (job_id, attempt)
        h.clock.advance(0.25)  # the work takes a quarter second
        result = await h.nack(job, message=f"fail {attempt}")
        assert (result.state, result.run_at) == (int(State.SCHEDULED), h.now + delay)
        # Not a µs early: neither a sweep nor a reserve hands it out before run_at.
        h.clock.advance(us=delay - 1)
        assert (await h.sweeper.run_once())["promote"].count == 0
        assert await h.reserve() == []
        h.clock.advance(us=1)
    (last,) = await h.reserve()
    assert last.attempt == 6
    h.clock.advance(0.25)
    final = await h.nack(last, message="fail 6")
    assert (final.state, final.run_at) == (int(State.DEAD_LETTERED), h.now)
    dead = await h.job(job_id)
    assert (dead.reason, dead.finished_at) == ("ATTEMPTS_EXHAUSTED", h.now)
    history = json.loads(dead.history or "[]")
    assert [e["outcome"] for e in history] == ["retry"] * 5 + ["attempts_exhausted"]
    assert [e["error_message"] for e in history] == [f"fail {i}" for i in range(1, 7)]
    assert all(e["ended_at"] - e["started_at"] == S // 4 for e in history)


async def test_jittered_delays_stay_within_their_bounds(make_harness: HarnessFactory) -> None:
    attempts = 8
    h = await make_harness(queues={"q": {"retry_base": 1.0, "retry_cap": 16.0, "retry_jitter": 0.5,
                                         "default_max_attempts": attempts + 1}})
    ids = [(await h.enqueue())[0] for _ in range(12)]
    seen: dict[int, set[int]] = {}
    for attempt in range(1, attempts + 1):
        jobs = await h.reserve(n=12)
        assert sorted(j.id for j in jobs) == sorted(ids) and {j.attempt for j in jobs} == {attempt}
        nominal = min(16, 2 ** (attempt - 1)) * S
        for job in jobs:
            delay = (await h.nack(job)).run_at - h.now
            assert nominal * 0.5 <= delay <= nominal * 1.5, (attempt, delay)
            seen.setdefault(attempt, set()).add(delay)
        h.clock.advance(us=int(16 * 1.5 * S))  # past the latest possible run_at
    assert all(len(delays) > 1 for delays in seen.values())  # really jittered


async def test_retry_after_is_exact_and_ignores_the_backoff(harness: Harness) -> None:
    h = harness
    job_id, _ = await h.enqueue(max_attempts=3)
    (job,) = await h.reserve()
    result = await h.nack(job, retry_after_s=90)
    assert (result.state, result.run_at) == (int(State.SCHEDULED), h.now + 90 * S)
    h.clock.advance(90)
    (again,) = await h.reserve()
    assert (again.id, again.attempt) == (job_id, 2)
    zero = await h.nack(again, retry_after_s=0)
    assert (zero.state, zero.run_at) == (int(State.READY), h.now)


async def test_release_keeps_the_attempt_and_dead_letter_ends_at_once(harness: Harness) -> None:
    h = harness
    job_id, _ = await h.enqueue(max_attempts=2)
    (job,) = await h.reserve()
    assert (await h.nack(job, release=True)).state == State.READY
    (job,) = await h.reserve()
    assert job.attempt == 1  # the released attempt was given back
    result = await h.nack(job, dead_letter="bad input")
    assert result.state == State.DEAD_LETTERED
    assert (await h.job(job_id)).reason == "NACK_DEAD_LETTER: bad input"
    with pytest.raises(LeaseRefused) as refused:
        await h.nack(job)
    assert refused.value.error is SettleError.LEASE_EXPIRED


async def test_max_attempts_one_is_never_retried_and_a_bare_nack_is_a_plain_retry(make_harness: HarnessFactory) -> None:
    h = await make_harness(queues={"q": {"retry_base": 3.0, "retry_jitter": 0.0}})
    once, _ = await h.enqueue(max_attempts=1)
    (job,) = await h.reserve()
    assert (await h.nack(job, message="no")).state == State.DEAD_LETTERED
    assert (await h.job(once)).reason == "ATTEMPTS_EXHAUSTED"
    twice, _ = await h.enqueue(max_attempts=2)
    (job,) = await h.reserve()
    result = await h.nack(job, bare=True)
    assert (result.state, result.run_at) == (int(State.SCHEDULED), h.now + 3 * S)
    assert json.loads((await h.job(twice)).history or "[]")[0]["outcome"] == "retry"


async def test_a_negative_retry_after_is_refused_and_the_lease_kept(harness: Harness) -> None:
    h = harness
    job_id, _ = await h.enqueue()
    (job,) = await h.reserve()
    with pytest.raises(InvalidRequest) as refused:
        await h.nack(job, retry_after_s=-1)
    assert refused.value.field == "retry_after"
    assert (await h.job(job_id)).state == State.RESERVED
    assert (await h.ack(job)).state == State.COMPLETED
