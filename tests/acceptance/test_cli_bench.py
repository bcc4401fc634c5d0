"""``sepp bench`` loads a running server, reports what it did, and cleans up after itself
(its 20,000 leftover jobs dominated the dashboard, and it had no --json)."""

from __future__ import annotations

import json
import subprocess
import sys

import grpc

from sepp.api.v1 import admin_pb2 as apb
from sepp.api.v1 import admin_pb2_grpc, producer_pb2_grpc
from sepp.api.v1 import common_pb2 as pb
from sepp.testing import ServerProcess


def bench(server: ServerProcess, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "sepp", "bench", "--server", server.grpc_target, "--jobs", "600",
                           "--batch", "256", "--concurrency", "2", *args],
                          capture_output=True, text=True, timeout=120)


def queue_names(server: ServerProcess) -> set[str]:
    with grpc.insecure_channel(server.grpc_target) as channel:
        listing = admin_pb2_grpc.AdminServiceStub(channel).ListQueues(apb.ListQueuesRequest())
    return {q.name for q in listing.queues}


def test_bench_reports_its_run_and_deletes_its_queue_afterwards(server: ServerProcess) -> None:
    done = bench(server, "--queue", "b")
    assert done.returncode == 0, done.stderr
    assert "600 jobs" in done.stdout and "worked off" in done.stdout
    assert "2 × 256 job(s) + 1 × 88 job(s), 2 in flight" in done.stdout  # not "3 × 256" (new-user trial)
    assert "queue b deleted with 600 job(s)" in done.stdout
    assert "b" not in queue_names(server)


def test_bench_json_and_keep_leave_the_jobs_it_reports(server: ServerProcess) -> None:
    done = bench(server, "--queue", "kept", "--keep", "--json")
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    assert (doc["jobs"], doc["calls"], doc["cleaned_up"], doc["jobs_deleted"]) == (600, 3, False, None)
    assert doc["enqueue_jobs_per_second"] > 0 and doc["drain_jobs_per_second"] > 0
    assert doc["ack_latency_ms"]["p50"] <= doc["ack_latency_ms"]["p99"]
    with grpc.insecure_channel(server.grpc_target) as channel:
        stats = admin_pb2_grpc.AdminServiceStub(channel).GetQueueStats(apb.GetQueueStatsRequest(queues=["kept"]))
    (queue,) = stats.stats
    assert (queue.completed, queue.ready) == (600, 0)


def test_bench_refuses_a_queue_that_holds_other_jobs(server: ServerProcess) -> None:
    with grpc.insecure_channel(server.grpc_target) as channel:
        producer_pb2_grpc.ProducerServiceStub(channel).Enqueue(pb.EnqueueRequest(queue="busy", job_type="real"))
    done = bench(server, "--queue", "busy")
    assert done.returncode == 2
    assert "already holds 1 job(s)" in done.stderr and "--keep" in done.stderr
    assert "busy" in queue_names(server)
    refused = bench(server, "--queue", "busy", "--json")
    assert refused.returncode == 2 and json.loads(refused.stderr)["jobs"] == 1


def test_bench_against_no_server_fails_with_a_transport_error() -> None:
    done = subprocess.run([sys.executable, "-m", "sepp", "bench", "--server", "127.0.0.1:1", "--jobs", "1"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 3
    assert "bench failed" in done.stderr
