"""Live job events across nodes: a watcher on node n1 sees what happens on the other nodes —
a job enqueued, reserved and acked through n2 — once the other nodes heard of the watcher
(its announcement on the events channel; docs/decisions.md "Progress and live job events")."""

from __future__ import annotations

import threading

import pytest
from support.waiting import wait_for
from support.worker import Wire

from sepp import Client, EnqueueRequest
from sepp.client.watch import JobEvent
from sepp.testing import ServerProcess

pytestmark = pytest.mark.timeout(120)


def test_a_watcher_on_one_node_sees_a_job_acked_on_another(cluster: list[ServerProcess]) -> None:
    a, b = cluster[0], cluster[1]
    queue = "watched"
    events: list[JobEvent] = []
    with Client(a.grpc_target) as watcher_client, Client(b.grpc_target) as producer:
        watch = watcher_client.watch(queues=[queue])
        reader = threading.Thread(target=lambda: events.extend(watch), daemon=True)
        reader.start()
        try:
            # Events are live: b relays once it heard of a's watcher. Enqueue probes through
            # b until one is seen on a.
            probes: set[str] = set()

            def relayed() -> bool:
                probes.add(producer.enqueue(EnqueueRequest(queue, "probe")).job_id)
                return wait_quiet(lambda: any(e.job_id in probes for e in events))

            wait_for(relayed, timeout=30, interval=0.05, what="an event made on n2 to reach the watcher on n1")
            w = Wire(b.grpc_target, queue=queue)
            try:
                job_id = w.enqueue(queue, "work")
                res = w.reserve_one([queue])
                while res.job.id != job_id:  # the probes first
                    w.ack(res)
                    res = w.reserve_one([queue])
                w.ack(res)
            finally:
                w.close()
            wait_for(lambda: any(e.job_id == job_id and e.kind == "completed" for e in events), timeout=20,
                     what="the ack on n2 to reach the watcher on n1")
        finally:
            watch.close()
            reader.join(10)
    mine = [e for e in events if e.job_id == job_id]
    assert [e.kind for e in mine] == ["enqueued", "reserved", "completed"]
    assert {e.node for e in mine} == {"n2"}
    assert [e.position for e in events] == sorted(e.position for e in events)


def wait_quiet(probe: object) -> bool:
    try:
        return bool(wait_for(probe, timeout=0.5, interval=0.01))  # type: ignore[arg-type]
    except AssertionError:
        return False
