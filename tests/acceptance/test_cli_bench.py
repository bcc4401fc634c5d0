"""``sepp bench`` loads a running server, and the jobs it enqueues are really there (SPEC §4)."""

from __future__ import annotations

import subprocess
import sys

import grpc

from sepp.api.v1 import admin_pb2 as apb
from sepp.api.v1 import admin_pb2_grpc
from sepp.testing import ServerProcess


def test_bench_enqueues_and_works_off_the_jobs_it_reports(server: ServerProcess) -> None:
    done = subprocess.run([sys.executable, "-m", "sepp", "bench", "--server", server.grpc_target, "--jobs", "600",
                           "--batch", "256", "--concurrency", "2", "--queue", "b"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "600 jobs" in done.stdout and "worked off" in done.stdout
    with grpc.insecure_channel(server.grpc_target) as channel:
        stats = admin_pb2_grpc.AdminServiceStub(channel).GetQueueStats(apb.GetQueueStatsRequest(queues=["b"]))
    (queue,) = stats.stats
    assert (queue.completed, queue.ready) == (600, 0)


def test_bench_against_no_server_fails_with_a_transport_error() -> None:
    done = subprocess.run([sys.executable, "-m", "sepp", "bench", "--server", "127.0.0.1:1", "--jobs", "1"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 3
    assert "bench failed" in done.stdout
