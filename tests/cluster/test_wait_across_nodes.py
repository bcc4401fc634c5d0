"""A wait on one node for a job acked through another: answered within 100 ms on a quiet
machine (the figures printed). The nodes tell each other (NOTIFY) of finished jobs only
while some node has callers waiting; without that news a wait would still be answered, by
its own re-read of the stored state every 2 s — what is asserted is that the news came
(well under the re-read's 2 s), and the median against the 100 ms goal."""

from __future__ import annotations

import statistics
import threading
import time

from support.worker import Wire

from sepp import Client
from sepp.testing import ServerProcess

#: Seconds a wait may take to answer after the ack: a wait that missed the other node's news
#: answers only at its next re-read, about 2 s later.
NEWS_BOUND = 1.5


def test_a_wait_on_one_node_is_answered_when_the_job_is_acked_on_another(cluster: list[ServerProcess]) -> None:
    a_node, b_node = cluster[0], cluster[1]
    b = Wire(b_node.grpc_target, queue="waits")
    latencies: list[float] = []
    try:
        with Client(a_node.grpc_target) as client:
            for _ in range(5):
                job_id = b.enqueue()
                res = b.reserve_one()
                answered = threading.Event()
                got: list[object] = []

                def wait(job: str = job_id, into: list[object] = got, done: threading.Event = answered) -> None:
                    into.append(client.result(job, timeout=30))
                    done.set()

                threading.Thread(target=wait, daemon=True).start()
                # parked on node A past its first re-read (0.25 s): only news from B answers it soon
                assert not answered.wait(0.6), "the wait answered before the job finished"
                b.ack(res)
                acked = time.monotonic()
                assert answered.wait(10), "the wait was not answered"
                latencies.append(time.monotonic() - acked)
                assert got == [None]
    finally:
        b.close()
    print(f"\nwait on n1 answered {', '.join(f'{x * 1000:.0f}' for x in latencies)} ms after an ack through n2")
    assert max(latencies) < NEWS_BOUND, latencies
    assert statistics.median(latencies) < 0.1, latencies
