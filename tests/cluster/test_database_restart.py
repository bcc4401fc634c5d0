"""PostgreSQL restarted mid-run: while
producers enqueue (retrying, each job under an idempotency key of its own) and workers
work on all three nodes, ``pg_ctlcluster 15 main restart`` runs. The nodes recover by
themselves (no sepp restart), the requests that fail meanwhile fail as ``UNAVAILABLE``
(never UNKNOWN/INTERNAL), and every acknowledged job is in the database afterwards —
exactly once — and gets completed.

Restarting PostgreSQL disturbs whoever else uses it at that moment: this module is the
only one that does it; PostgreSQL is started again in a ``finally`` whatever happens.
"""

from __future__ import annotations

import subprocess
import threading
import time
from collections import Counter
from pathlib import Path

import grpc
import pytest
from support.producer import Stubs, connect
from support.waiting import wait_for
from support.worker import Wire, queue_rows

from sepp.api.v1 import common_pb2 as pb
from sepp.server.cluster import HEARTBEAT_EVERY
from sepp.testing import ServerProcess
from sepp.worker import Job

from .harness import Fleet, queue_stats

#: Restarting PostgreSQL breaks whatever else uses it at that moment: `make test` runs this
#: module after the parallel run, alone.
pytestmark = pytest.mark.exclusive


def _pg_version() -> str:
    """The one PostgreSQL version of this machine's clusters (/etc/postgresql/<version>)."""
    (version,) = [p.name for p in Path("/etc/postgresql").iterdir() if p.is_dir()]
    return version


def _pg_ctl(action: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["pg_ctlcluster", _pg_version(), "main", action], capture_output=True, text=True,
                          timeout=120)


def _ensure_postgres_up() -> None:
    """Start the cluster if it is not running, then wait (≤ 30 s) until it accepts connections."""
    if _pg_ctl("status").returncode != 0:
        _pg_ctl("start")
    wait_for(lambda: subprocess.run(["pg_isready", "-h", "127.0.0.1", "-p", "5432", "-q"]).returncode == 0,
             timeout=30, interval=0.1, what="PostgreSQL to accept connections again")


def _tracebacks(output: list[str]) -> list[tuple[str, str]]:
    """Each traceback in a node's output as (the log line before it, its exception line)."""
    found: list[tuple[str, str]] = []
    for n, line in enumerate(output):
        if line.startswith("Traceback"):
            end = next((m for m in range(n + 1, len(output)) if not output[m].startswith(" ")), len(output) - 1)
            found.append((output[n - 1] if n else "", output[end]))
    return found


class Producer(threading.Thread):
    """Enqueues jobs of its own keys through one node until ``stop``; a failed Enqueue is
    retried with the same key (so an ambiguous failure cannot make a second job)."""

    def __init__(self, node: ServerProcess, name: str) -> None:
        super().__init__(daemon=True, name=name)
        self.wire = Wire(node.grpc_target, queue="durable")
        self.acked: dict[str, str] = {}  # key → job id
        self.errors: Counter[str] = Counter()
        self.details: list[str] = []
        self.acked_at: list[float] = []  # monotonic time of each ack
        self.stop = threading.Event()

    def run(self) -> None:
        n = 0
        while not self.stop.is_set():
            n += 1
            key = f"{self.name}-{n}"
            while True:  # until this key is acknowledged (a producer never drops a job)
                try:
                    ack = self.wire.producer.Enqueue(pb.EnqueueRequest(queue="durable", job_type="t",
                                                                       idempotency_key=key), timeout=20)
                except grpc.RpcError as exc:
                    code = exc.code()  # type: ignore[attr-defined]
                    self.errors[code.name] += 1
                    if code != grpc.StatusCode.UNAVAILABLE and len(self.details) < 5:
                        self.details.append(f"{code.name}: {exc.details()}")  # type: ignore[attr-defined]
                    time.sleep(0.05)  # a retry back-off, not a wait for a condition
                    continue
                self.acked[key] = ack.job_id
                self.acked_at.append(time.monotonic())
                break
        self.wire.close()


def test_the_nodes_recover_from_a_database_restart_and_lose_nothing_acknowledged(
        cluster: list[ServerProcess]) -> None:
    async def handle(job: Job) -> None:
        return None

    producers = [Producer(cluster[i % 3], f"p{i}") for i in range(6)]
    fleet = Fleet(cluster, "durable", handle, concurrency=8).start()
    restarted_at = 0.0
    try:
        for p in producers:
            p.start()
        wait_for(lambda: sum(len(p.acked) for p in producers) >= 300, timeout=60, interval=0.02,
                 what="300 acknowledged jobs before the restart")
        before = sum(len(p.acked) for p in producers)
        began = time.monotonic()
        result = _pg_ctl("restart")
        restarted_at = time.monotonic()
        assert result.returncode == 0, result.stderr
        # every node answers again by itself: a fresh ack through each one's producers
        recovered: dict[str, float] = {}
        for i in range(len(cluster)):
            mine = [p for j, p in enumerate(producers) if j % 3 == i]

            def acked_again(mine: list[Producer] = mine) -> bool:
                return any(t > restarted_at for p in mine for t in p.acked_at)

            wait_for(acked_again, timeout=30, interval=0.02,
                     what=f"n{i + 1} to acknowledge an Enqueue after the restart")
            recovered[f"n{i + 1}"] = min(t for p in mine for t in p.acked_at if t > restarted_at) - restarted_at
        total = sum(len(p.acked) for p in producers)
        wait_for(lambda: sum(len(p.acked) for p in producers) >= total + 300, timeout=60, interval=0.02,
                 what="300 more acknowledged jobs after the restart")
    finally:
        for p in producers:
            p.stop.set()
        for p in producers:
            p.join(30)
        _ensure_postgres_up()
    acked = {job_id for p in producers for job_id in p.acked.values()}
    try:
        wait_for(lambda: queue_stats(cluster[0], "durable").completed >= len(acked), timeout=30, interval=0.1,
                 what=f"every one of the {len(acked)} acknowledged jobs completed")
    finally:
        fleet.stop()
    errors = sum((p.errors for p in producers), Counter())
    details = [d for p in producers for d in p.details]
    print(f"\nrestart took {restarted_at - began:.2f} s; {before} jobs acked before it, {len(acked)} in all; "
          f"failed Enqueues by code: {dict(errors)}; first acks after it: "
          + ", ".join(f"{k} +{v * 1000:.0f} ms" for k, v in recovered.items()))
    assert set(errors) <= {"UNAVAILABLE"}, (dict(errors), details)
    assert all(node.proc is not None and node.proc.poll() is None for node in cluster), "a node died"
    stored = queue_rows(cluster[1], "durable")
    assert acked <= set(stored), f"acknowledged jobs missing: {len(acked - set(stored))}"
    assert len(stored) == len(acked), f"{len(stored) - len(acked)} jobs stored that nobody got an ack for"
    assert {r.state for r in stored.values()} == {"COMPLETED"}, Counter(r.state for r in stored.values())
    assert max(fleet.ledger.acked().values()) == 1, "a job was acknowledged as completed twice"
    for i, node in enumerate(cluster, 1):  # the heartbeats go on: each node lists all three again
        with connect(node.grpc_target) as stubs:
            def all_listed(stubs: Stubs = stubs) -> bool:
                info = stubs.info()
                return info.storage == "postgres" and {n.name for n in info.nodes} == {"n1", "n2", "n3"}

            wait_for(all_listed, timeout=3 * HEARTBEAT_EVERY, interval=0.1,
                     what=f"n{i} to list every node again (a heartbeat after the restart)")
    # A lost connection is StoreUnavailable, logged by sepp as a one-line warning; a
    # traceback from sepp's own loggers means an outage error was taken for a real failure.
    # (asyncpg's pool logs its own reconnect attempts with a traceback: reported, allowed.)
    logged = {f"n{i}": _tracebacks(node.output) for i, node in enumerate(cluster, 1)}
    noise = sum(1 for found in logged.values() for context, _ in found if " asyncpg." in context)
    ours = {name: [t for t in found if " asyncpg." not in t[0]] for name, found in logged.items()}
    print(f"asyncpg.pool reconnect warnings with a traceback: {noise}")
    assert not any(ours.values()), f"sepp logged the outage with tracebacks (context line, exception): {ours}"
