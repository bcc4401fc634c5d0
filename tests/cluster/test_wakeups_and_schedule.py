"""Cross-node timing: a scheduled job is promoted once and delivered once although every
node sweeps; a long-polling ``Reserve`` on one node wakes within 100 ms on a quiet machine
(the figure printed) when a job is enqueued through another node, and when a job scheduled
through another node becomes due. What is asserted is the failure mode: a Reserve not woken
waits out its 10 s long poll (``WAKE_BOUND``, half of it, leaves a loaded machine room)."""

from __future__ import annotations

import datetime as dt
import statistics
import threading
import time
from collections import Counter

import grpc
from support.waiting import with_lead
from support.worker import Wire, job_row

from sepp import wire
from sepp.api.v1 import worker_pb2 as wpb
from sepp.testing import ServerProcess

from .harness import queue_stats

#: Seconds within which a parked 10 s long poll must have been woken.
WAKE_BOUND = 5.0


def _parked_reserve(w: Wire, queue: str, wait: float) -> tuple[grpc.Future, float]:
    """Start a long-polling Reserve (1 job) and check it is parked: still open 0.3 s later."""
    req = wpb.ReserveRequest(queues=[queue], max_jobs=1, worker_id="waker",
                             wait=wire.seconds_to_duration(wait))
    fut = w.worker.Reserve.future(req, timeout=wait + 10)
    started = time.monotonic()
    assert not _done_within(fut, 0.3), "the Reserve answered at once: nothing to wait for"
    return fut, started


def _done_within(fut: grpc.Future, seconds: float) -> bool:
    done = threading.Event()
    fut.add_done_callback(lambda _: done.set())
    return done.wait(seconds)


def test_a_scheduled_job_is_promoted_once_and_delivered_once(cluster: list[ServerProcess]) -> None:
    wires = [Wire(n.grpc_target, queue="sched") for n in cluster]
    try:
        def enqueue_ahead(lead: float) -> tuple[str, float, list[str]] | None:
            # 30 enqueues took over 1 s on a loaded machine: a longer lead when they outran it
            queue = f"sched-{lead:g}"
            run_at = time.time() + lead
            ids = [wires[i % 3].enqueue(queue, scheduled_at=_dt(run_at)) for i in range(30)]
            scheduled = queue_stats(cluster[0], queue).scheduled
            if time.time() >= run_at:
                return None
            assert scheduled == 30
            return queue, run_at, ids

        queue, run_at, ids = with_lead(enqueue_ahead, 2.5, tries=3, what="30 enqueues")
        got: list[tuple[str, str, float]] = []  # (job id, lease id, received at in epoch s)
        lock = threading.Lock()
        stop_at = run_at + 4.0  # a second promotion or delivery would show by then

        def reserve_loop(w: Wire) -> None:
            while time.time() < stop_at:
                for r in w.reserve([queue], max_jobs=8, wait=max(0.05, min(0.5, stop_at - time.time()))):
                    with lock:
                        got.append((r.job.id, r.lease_id, time.time()))

        threads = [threading.Thread(target=reserve_loop, args=(w,)) for w in wires for _ in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(15)
    finally:
        for w in wires:
            w.close()
    per_job = Counter(job_id for job_id, _, _ in got)
    assert set(per_job) == set(ids), "scheduled jobs never delivered"
    assert max(per_job.values()) == 1, f"delivered more than once: {[j for j, n in per_job.items() if n > 1]}"
    lateness = sorted(at - run_at for _, _, at in got)
    print(f"\n30 scheduled jobs delivered {lateness[0] * 1000:.0f}..{lateness[-1] * 1000:.0f} ms after due")
    assert lateness[0] >= -0.01, "delivered before its time"
    assert lateness[-1] < 3.0, lateness[-1]  # 0.1 s on a quiet machine; the rest is load
    for job_id in ids:
        row = job_row(cluster[1], job_id)
        assert row is not None and (row.state, row.attempt) == ("RESERVED", 1), (job_id, row)
    stats = queue_stats(cluster[2], queue)
    assert (stats.scheduled, stats.ready, stats.reserved) == (0, 0, 30), stats


def test_a_long_poll_on_one_node_wakes_when_a_job_is_enqueued_through_another(
        cluster: list[ServerProcess]) -> None:
    a, b = Wire(cluster[0].grpc_target, queue="wake"), Wire(cluster[1].grpc_target, queue="wake")
    try:
        a.enqueue("wake")  # the queue exists on every node (created on demand)
        a.reserve_one(wait=1.0)
        latencies = []
        for _ in range(5):
            fut, _ = _parked_reserve(b, "wake", 10.0)
            sent = time.monotonic()
            job_id = a.enqueue("wake")
            got = fut.result(12).reservations
            latencies.append(time.monotonic() - sent)
            assert [r.job.id for r in got] == [job_id]
    finally:
        a.close()
        b.close()
    print(f"\nReserve on n2 woke {_ms(latencies)} after an Enqueue through n1 was sent")
    assert max(latencies) < WAKE_BOUND, latencies


def test_a_long_poll_on_one_node_wakes_when_a_job_scheduled_through_another_is_due(
        cluster: list[ServerProcess]) -> None:
    a, b = Wire(cluster[0].grpc_target, queue="due"), Wire(cluster[2].grpc_target, queue="due")
    try:
        a.enqueue("due")
        a.reserve_one(wait=1.0)
        latencies = []
        for _ in range(3):
            fut, _ = _parked_reserve(b, "due", 10.0)
            run_at = time.time() + 0.5
            job_id = a.enqueue("due", scheduled_at=_dt(run_at))
            got = fut.result(12).reservations
            latencies.append(time.time() - run_at)
            assert [r.job.id for r in got] == [job_id]
    finally:
        a.close()
        b.close()
    print(f"\nReserve on n3 got a job scheduled through n1 {_ms(latencies)} after it was due")
    assert min(latencies) >= -0.01, "delivered before its time"
    assert max(latencies) < WAKE_BOUND, latencies


def _dt(epoch: float) -> dt.datetime:
    """Epoch seconds as an aware UTC datetime."""
    return dt.datetime.fromtimestamp(epoch, dt.UTC)


def _ms(values: list[float]) -> str:
    return (f"median {statistics.median(values) * 1000:.0f} ms, max {max(values) * 1000:.0f} ms "
            f"(n={len(values)})")

