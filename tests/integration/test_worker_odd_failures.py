"""A handler that fails in an odd way settles its own job and nobody else's.

The jobs that finish together share one ``Settle`` call, so a nack that cannot be written
(``DeadLetter(exc)``, ``Retry(exc)``, ``Retry(after=inf)``: a wire error) or that makes the
call too large for the server (a huge error message) used to fail the whole batch: the acks
in it were lost and their jobs stayed RESERVED until their lease ran out, then ran again.
An exception whose ``__str__`` raises, from a handler that had suspended, left its job held
for as long as the worker ran (its lease kept alive, never settled). A real server whose
message cap is 64 KiB; handlers held at a gate so their outcomes leave together.
"""

from __future__ import annotations

import asyncio
import math
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from support.servers import module_server
from support.worker import Gate, count_states, fast_queue, job_row, make_worker, running, until, wire_for

from sepp.client.admin import AdminClient
from sepp.testing import ServerProcess
from sepp.worker import DeadLetter, Job, Retry

pytestmark = pytest.mark.timeout(60)

#: The server's whole-message cap, bytes: a few nacks with 16 KiB texts exceed it.
CAP = 64 * 1024


@pytest.fixture(scope="module")
def small(tmp_path_factory: pytest.TempPathFactory, backend: str) -> Iterator[ServerProcess]:
    yield from module_server(tmp_path_factory, backend, limits={"max_message_bytes": CAP},
                             queue_defaults=fast_queue(lease_duration=30.0, limits={"max_payload_bytes": 1024}))


class BrokenStr(Exception):
    """An exception that cannot be shown."""

    def __str__(self) -> str:
        raise RuntimeError("no str for you")


class RetryWithoutInit(Retry):
    """A ``Retry`` subclass that skipped ``Retry.__init__`` (no ``message``, no ``after``)."""

    def __init__(self) -> None:  # deliberately not calling Retry.__init__
        pass


def _raiser(exc: Callable[[], BaseException]) -> Callable[[Job], Any]:
    async def handler(job: Job) -> None:
        await asyncio.sleep(0)  # suspended first: the path a failure used to escape from
        raise exc()

    return handler


#: kind → (what the handler raises, a part of the message the job's attempt records).
ODD: dict[str, tuple[Callable[[], BaseException], str]] = {
    "dead-letter-of-an-exception": (lambda: DeadLetter(ValueError("no good")), "no good"),
    "retry-of-an-exception": (lambda: Retry(ValueError("try later")), "try later"),
    "retry-after-infinity": (lambda: Retry(after=math.inf), "Retry(after=...) must be"),
    "retry-subclass-without-init": (RetryWithoutInit, "RetryWithoutInit"),
    "broken-str": (BrokenStr, "BrokenStr: <str() failed: BrokenStr>"),
    "huge-message": (lambda: ValueError("x" * (2 * CAP)), "ValueError: xxxx"),
    "lone-surrogate": (lambda: ValueError("bad name \udcff"), "bad name ?"),
}


@pytest.mark.parametrize("kind", list(ODD))
async def test_an_odd_failure_settles_its_job_and_spares_the_acks_sent_with_it(
        small: ServerProcess, fresh_queue: str, kind: str) -> None:
    raise_it, recorded = ODD[kind]
    gate = Gate()
    odd = _raiser(raise_it)

    async def odd_at_gate(job: Job) -> None:
        await gate.handler(job)
        await odd(job)

    worker, reports = make_worker(small, fresh_queue, concurrency=13)
    worker.register("ok", gate.handler)
    worker.register("odd", odd_at_gate)
    with wire_for(small, fresh_queue) as w:
        ids = [w.enqueue(fresh_queue, "ok") for _ in range(6)]
        odd_id = w.enqueue(fresh_queue, "odd", max_attempts=1)
        ids += [w.enqueue(fresh_queue, "ok") for _ in range(6)]
    async with running(worker):
        await until(lambda: gate.started == 13, what="every job at the gate")
        gate.open()  # all 13 finish together: their outcomes share Settle calls
        await until(lambda: len(reports) == 13, within=15, what="a report for every job")
    assert [r for r in reports if r.refused] == []
    assert count_states(small, fresh_queue) == {"COMPLETED": 12, "DEAD_LETTERED": 1}
    row = job_row(small, odd_id)
    assert row is not None and len(row.history) == 1
    message = row.history[0]["error_message"]
    assert recorded in message and len(message.encode()) <= 16 * 1024, message[:200]


async def test_a_settle_batch_too_large_for_the_server_goes_in_parts(small: ServerProcess, fresh_queue: str) -> None:
    # 20 nacks with ~12 KiB texts each (message and traceback): one call would be ~10 × the
    # server's cap. Refused unread, the batch is sent again in halves until each part fits.
    gate = Gate()

    async def fail_at_gate(job: Job) -> None:
        await gate.handler(job)
        raise ValueError("y" * 6000)

    worker, reports = make_worker(small, fresh_queue, concurrency=30)
    worker.register("ok", gate.handler)
    worker.register("fail", fail_at_gate)
    with wire_for(small, fresh_queue) as w:
        for i in range(30):
            w.enqueue(fresh_queue, "fail" if i % 3 else "ok", max_attempts=1)
    async with running(worker):
        await until(lambda: gate.started == 30, what="every job at the gate")
        gate.open()
        await until(lambda: len(reports) == 30, within=15, what="a report for every job")
    assert [r for r in reports if r.refused] == []
    assert Counter(r.outcome for r in reports) == {"completed": 10, "retry": 20}
    with AdminClient(small.grpc_target) as admin:  # (ListJobs of these jobs: over the cap too)
        stats = admin.queue_stats([fresh_queue])[0]
    assert (stats.completed, stats.dead_lettered, stats.reserved, stats.ready) == (10, 20, 0, 0)


@pytest.fixture(scope="module")
def near(tmp_path_factory: pytest.TempPathFactory, backend: str) -> Iterator[ServerProcess]:
    """A server whose schedule horizon is one hour (leases 30 s: an expiry would show)."""
    yield from module_server(tmp_path_factory, backend, limits={"max_schedule_horizon": 3600.0},
                             queue_defaults=fast_queue(lease_duration=30.0))


async def test_a_retry_later_than_the_servers_horizon_retries_with_the_backoff(near: ServerProcess,
                                                                              fresh_queue: str) -> None:
    # Retry(after=2 h) against a 1 h horizon: the server refuses that nack (INVALID_ARGUMENT,
    # field retry_after). The job used to stay RESERVED until its lease expired; the worker now
    # retries it with the queue's backoff, and its next attempt runs.
    attempts: list[int] = []

    async def later(job: Job) -> None:
        attempts.append(job.attempt)
        if job.attempt == 1:
            raise Retry("not yet", after=7200)

    worker, reports = make_worker(near, fresh_queue)
    worker.register("later", later)
    with wire_for(near, fresh_queue) as w:
        job_id = w.enqueue(fresh_queue, "later", max_attempts=3)
    async with running(worker):
        await until(lambda: attempts == [1, 2] and len(reports) == 2, within=10, what="a second attempt")
    assert [r.refused for r in reports] == ["", ""]
    row = job_row(near, job_id)
    assert row is not None and [a["outcome"] for a in row.history][:1] == ["retry"]
    assert count_states(near, fresh_queue) == {"COMPLETED": 1}
