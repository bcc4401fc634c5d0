"""A node SIGKILLed mid-run: the jobs its workers held come back once
their leases (2 s here) run out and are completed through the other nodes; nothing
acknowledged is lost and nothing is completed twice."""

from __future__ import annotations

import asyncio
import time

from support.waiting import wait_for
from support.worker import job_row, queue_rows

from sepp.testing import ServerProcess
from sepp.worker import Job

from .conftest import ClusterFactory
from .harness import Fleet, enqueue_spread, explain, queue_stats

JOBS = 300
LEASE = 2.0
QUEUE = {"crash": {"lease_duration": LEASE, "retry_base": 0.05, "retry_jitter": 0.0}}


def test_a_killed_nodes_leased_jobs_come_back_and_are_completed_by_the_others(
        cluster_factory: ClusterFactory) -> None:
    cluster: list[ServerProcess] = cluster_factory(3, queues=QUEUE)

    async def handle(job: Job) -> None:
        await asyncio.sleep(0.2)

    fleet = Fleet(cluster, "crash", handle, concurrency=8, prefetch=4).start()
    try:
        ids = enqueue_spread(cluster, "crash", JOBS, batch=100)
        ledger = fleet.ledger
        try:
            wait_for(lambda: fleet.held(2) >= 8 and len(ledger.acked()) >= 30, timeout=30)
        except AssertionError:
            raise AssertionError("n3's workers never held jobs while others were done\n"
                                 + explain(cluster, "crash", fleet)) from None
        cluster[2].kill()
        killed_at = time.monotonic()
        fleet.abandon(2)
        # Handlers n3's workers started and had not finished once their node was dead: their
        # acks came after the kill, so none can have been stored. (Whatever n3's workers did
        # after the check above, they held leases when it died: the jobs its reserves got.)
        unfinished = {j for j, by in list(ledger.delivered_by.items()) if by == [2] and j not in ledger.finished}
        wait_for(lambda: queue_stats(cluster[0], "crash").completed == JOBS, timeout=LEASE + 15, interval=0.05,
                 what=f"all {JOBS} jobs completed through n1/n2")
        all_done_after = time.monotonic() - killed_at
    finally:
        fleet.stop(grace=0.0)
    stats = queue_stats(cluster[1], "crash")
    assert (stats.completed, stats.ready, stats.reserved, stats.dead_lettered) == (JOBS, 0, 0, 0), stats
    acked = ledger.acked()
    assert max(acked.values()) == 1, "a job was acknowledged as completed twice"
    assert set(acked) <= set(ids)
    # The server's account: the handler never fails, so a job on a second attempt is one
    # whose lease n3 held when it died (running or prefetched there).
    came_back_ids = {j for j, row in queue_rows(cluster[0], "crash").items() if row.attempt >= 2}
    assert came_back_ids, "no job leased by n3 came back after its death"
    assert unfinished <= came_back_ids, f"unfinished on n3 yet completed at once: {unfinished - came_back_ids}"
    came_back: list[float] = []  # when each lease ran out (epoch s, from the attempt history)
    for job_id in came_back_ids:
        row = job_row(cluster[0], job_id)
        assert row is not None and row.state == "COMPLETED", (job_id, row)
        assert row.history[0]["outcome"] == "lease_expired", row.history
        assert acked[job_id] == 1 and all(i != 2 for i, r in ledger.reports
                                          if r.job.id == job_id and r.state == "completed" and not r.refused), \
            f"{job_id} must be completed by n1/n2: {ledger.delivered_by[job_id]}"
        assert 2 not in ledger.delivered_by[job_id][1:], f"{job_id} went back to n3: {ledger.delivered_by[job_id]}"
        expired_at = row.history[0]["ended_at"] / 1e6
        came_back.append(expired_at)
    redelivered = len(came_back)
    kill_wall = time.time() - (time.monotonic() - killed_at)
    lease_ends = [round(t - kill_wall, 2) for t in sorted(came_back)]
    print(f"\nleases of the dead node's jobs ended {lease_ends} s after the kill (lease {LEASE} s)")
    print(f"n3 had {len(unfinished)} handlers running when killed; {redelivered} came back after their lease "
          f"and were completed by n1/n2; all {JOBS} completed {all_done_after:.2f} s after the kill")
    # A sweep every 0.05 s reclaims them at once on a quiet machine; 5 s leaves a loaded one room.
    assert all(0 < t <= LEASE + 5.0 for t in lease_ends), f"reclaimed long after the lease ran out: {lease_ends}"
    assert all_done_after > LEASE * 0.5, "jobs held by the dead node came back before their lease could end"
