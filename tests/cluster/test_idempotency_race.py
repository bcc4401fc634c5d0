"""Idempotency exactly-once across nodes: 32 producers racing
one idempotency key through three nodes store exactly one job; the 31 others answer
``deduplicated = true`` with its id, never an error."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

from support.producer import Stubs, connect, job
from support.worker import count_states

from sepp.api.v1 import admin_pb2 as apb
from sepp.testing import ServerProcess

RACERS = 32


def test_32_concurrent_enqueues_with_one_key_store_exactly_one_job(cluster: list[ServerProcess]) -> None:
    stubs = [Stubs(cluster[i % 3].grpc_target) for i in range(RACERS)]
    try:
        for s in stubs:
            s.info()  # channels connected before the race
        barrier = threading.Barrier(RACERS)

        def race(s: Stubs) -> tuple[str, bool]:
            barrier.wait(10)
            ack = s.enqueue(job("race", "t", key="the-one-key", data=b"x"))
            return ack.job_id, ack.deduplicated

        with ThreadPoolExecutor(RACERS) as pool:
            answers = list(pool.map(race, stubs))
    finally:
        for s in stubs:
            s.close()
    ids = {job_id for job_id, _ in answers}
    assert len(ids) == 1, f"one key, several jobs: {ids}"
    stored = [a for a in answers if not a[1]]
    assert len(stored) == 1, f"{len(stored)} answers claim to have stored the job"
    assert sum(dedup for _, dedup in answers) == RACERS - 1
    for node in cluster:  # every node sees the same single job
        assert count_states(node, "race") == {"READY": 1}
    with connect(cluster[2].grpc_target) as s:
        found = s.admin.FindJobByIdempotencyKey(apb.FindJobByIdempotencyKeyRequest(queue="race", key="the-one-key"),
                                                timeout=10)
    assert found.job_id == ids.pop()
