"""20,000 jobs worked by Worker runtimes on all three nodes: every job
completed exactly once — a job may be delivered twice only after a lease expiry, and then
its first lease's ack is refused — and none lost (the queue's counts show every job
completed). Producers are spread over the nodes and run while the workers work."""

from __future__ import annotations

import threading
import time

from support.waiting import wait_for
from support.worker import Wire, job_row

from sepp.api.v1 import worker_pb2 as wpb
from sepp.testing import ServerProcess

from .harness import Fleet, enqueue_spread, queue_stats

JOBS = 20_000


def test_20000_jobs_over_three_nodes_complete_exactly_once(cluster: list[ServerProcess]) -> None:
    async def handle(job: object) -> None:
        return None

    fleet = Fleet(cluster, "bulk", handle, concurrency=64).start()
    try:
        started = time.monotonic()
        ids: list[str] = []
        producer = threading.Thread(target=lambda: ids.extend(enqueue_spread(cluster, "bulk", JOBS, batch=256)))
        producer.start()
        producer.join(120)
        enqueued_in = time.monotonic() - started
        assert len(ids) == JOBS and len(set(ids)) == JOBS
        wait_for(lambda: len(fleet.ledger.acked()) >= JOBS, timeout=120, interval=0.1,
                 what=f"{JOBS} acks (have {len(fleet.ledger.acked())})")
        done_in = time.monotonic() - started
    finally:
        fleet.stop()
    print(f"\n{JOBS} jobs: enqueued in {enqueued_in:.1f} s, all completed after {done_in:.1f} s "
          f"({JOBS / done_in:.0f} jobs/s end to end over 3 nodes)")
    ledger = fleet.ledger
    acked = ledger.acked()
    assert set(acked) == set(ids), "acks for jobs nobody enqueued, or jobs never acked"
    twice = {job_id: n for job_id, n in acked.items() if n != 1}
    assert not twice, f"jobs completed more than once: {list(twice.items())[:5]}"
    refused = ledger.refused()
    for job_id, leases in ledger.deliveries.items():
        assert len(set(leases)) == len(leases), f"{job_id} delivered twice under one lease"
        if len(leases) > 1:  # a redelivery: only after a lease expiry, earlier acks refused
            assert len(refused.get(job_id, [])) == len(leases) - 1, (job_id, leases, refused.get(job_id))
            assert set(refused[job_id]) <= {"LEASE_EXPIRED", "LEASE_MISMATCH"}, refused[job_id]
    per_node = [sum(1 for i, r in ledger.reports if i == n and r.state == "completed" and not r.refused)
                for n in range(3)]
    print(f"completions per node: {per_node}; redeliveries: {sum(len(v) - 1 for v in ledger.deliveries.values())}")
    assert all(per_node), f"a node's workers completed nothing: {per_node}"
    for node in cluster:
        stats = queue_stats(node, "bulk")
        assert (stats.completed, stats.ready, stats.reserved, stats.scheduled, stats.dead_lettered) == \
            (JOBS, 0, 0, 0, 0), stats


def test_a_redelivery_after_a_lease_expiry_fences_the_first_lease_on_every_node(
        cluster: list[ServerProcess]) -> None:
    """The rule the big run relies on, made to happen: a lease that ran out on one node is
    refused on every node once the job went to another worker; only the new lease settles."""
    w1, w2, w3 = (Wire(n.grpc_target, queue="fence") for n in cluster)
    try:
        job_id = w1.enqueue("fence", max_attempts=5)
        first = w1.reserve_one(lease=0.3)
        again = w2.reserve_one(wait=15.0)  # long-polls until the sweep gives the job back
        assert (again.job.id, again.attempt) == (job_id, 2)
        assert again.lease_id != first.lease_id
        for w in (w1, w2, w3):
            (late,) = w.settle([wpb.SettleItem(ack=wpb.AckRequest(job_id=job_id, lease_id=first.lease_id))])
            assert not late.ok and late.error_reason in ("LEASE_EXPIRED", "LEASE_MISMATCH"), late
        w3.ack(again)
    finally:
        for w in (w1, w2, w3):
            w.close()
    row = job_row(cluster[0], job_id)
    assert row is not None and (row.state, row.attempt) == ("COMPLETED", 2), row
    assert [h["outcome"] for h in row.history] == ["lease_expired", "completed"], row.history
