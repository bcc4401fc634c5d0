"""Nothing held after a Worker stops.

* A stream of jobs settled by a worker, round after round on one server: after every
  round the admin API shows 0 RESERVED (an ack left unsent would show as RESERVED until
  its lease expired).
* SIGTERM of a loaded ``sepp worker`` process, ten rounds: once it has exited, 0 jobs are
  RESERVED — a ``Reserve`` the server answered is never abandoned, its jobs are released.
  The stopping worker asks the server to end its long-polls (``StopReserving``) and awaits
  every open call instead of cancelling it, so this holds on a loaded machine too, where a
  ``Reserve`` of 256 jobs can take a second (it was cancelled after 0.25 s before).

Leases are long (60 s) so an expiry can never hide a job left held.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from support.servers import ServerFactory
from support.waiting import wait_for
from support.worker import Gate, fast_queue, until, wire_for

from sepp.api.v1 import common_pb2 as pb
from sepp.client.admin import AdminClient
from sepp.testing import ServerProcess
from sepp.worker import Job, JobReport, Worker

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def server(server_factory: ServerFactory) -> ServerProcess:
    return server_factory(queues={"q": fast_queue(lease_duration=60.0)})


def stats(admin: AdminClient) -> dict[str, int]:
    """Queue ``q`` by state (admin ``QueueStats``)."""
    (s,) = admin.queue_stats(["q"])
    return {k: int(getattr(s, k)) for k in ("ready", "reserved", "completed", "scheduled", "dead_lettered")}


@pytest.mark.sqlite_only(reason="backend-neutral (the Worker runtime's stop), 27 s; covered on PostgreSQL by "
                                "the other stop tests and the conformance suite")
async def test_every_job_of_a_stream_is_settled_round_after_round(server: ServerProcess) -> None:
    rounds, batches, per_batch = 100, 4, 5
    admin = AdminClient(server.grpc_target)
    try:
        with wire_for(server) as w:
            for n in range(rounds):
                worker = Worker(server.grpc_target, ["q"], poll_wait=0.5, worker_id=f"round-{n}")
                reports: list[JobReport] = []
                worker.on_outcome(reports.append)

                @worker.handler("t")
                async def t(job: Job) -> None:
                    await asyncio.sleep(0)

                run = asyncio.create_task(worker.run(install_signal_handlers=False))
                for _ in range(batches):  # the jobs arrive while the worker runs
                    await asyncio.to_thread(
                        w.enqueue_many, [pb.EnqueueRequest(queue="q", job_type="t") for _ in range(per_batch)])
                    await asyncio.sleep(0)
                deadline = time.monotonic() + 30
                while len(reports) < batches * per_batch:
                    assert time.monotonic() < deadline, f"round {n}: {len(reports)} reports"
                    await asyncio.sleep(0.002)
                await worker.stop(5.0)
                await asyncio.wait_for(run, 10)
                assert [r.refused for r in reports if r.refused] == [], f"round {n}"
                assert stats(admin) == {"ready": 0, "reserved": 0, "completed": (n + 1) * batches * per_batch,
                                        "scheduled": 0, "dead_lettered": 0}, f"round {n}"
    finally:
        admin.close()


MODULE = textwrap.dedent('''
    from sepp.worker import Job, Worker

    worker = Worker(queues=["q"], concurrency=256, prefetch=256, shutdown_grace=5.0)

    @worker.handler("t")
    async def noop(job: Job) -> None:
        pass
''')


@pytest.mark.slow
@pytest.mark.timeout(300)  # ten worker processes: ~40 s, ~110 s with two CPU hogs beside it (PostgreSQL)
def test_sigterm_of_a_loaded_worker_leaves_nothing_reserved(server: ServerProcess, tmp_path: Path) -> None:
    (tmp_path / "stop_handlers.py").write_text(MODULE, "utf-8")
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    cmd = [sys.executable, "-m", "sepp", "worker", "stop_handlers:worker", "--server", server.grpc_target,
           "--log-level", "warning", "--quiet"]
    admin = AdminClient(server.grpc_target)
    enqueued = 0
    try:
        with wire_for(server) as w:
            for n in range(10):
                for _ in range(16):  # 4,096 jobs a round: more than one worker drains in the round
                    w.enqueue_many([pb.EnqueueRequest(queue="q", job_type="t") for _ in range(256)])
                enqueued += 16 * 256
                before = stats(admin)["completed"]
                err = tmp_path / f"worker-{n}.err"
                with err.open("w") as fh:
                    proc = subprocess.Popen(cmd, cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=fh)
                try:
                    wait_for(lambda b=before: stats(admin)["completed"] >= b + 500, timeout=30,  # type: ignore[misc]
                             what=f"round {n}: the worker to be busy")
                    proc.send_signal(signal.SIGTERM)
                    assert proc.wait(30) == 0, err.read_text()
                finally:
                    if proc.poll() is None:
                        proc.kill()
                        proc.wait(10)
                # The worker released what its last Reserves brought before it exited. A call is
                # cancelled only when the server stops answering StopReserving (never here), and
                # the server gives the jobs of a call it sees cancelled back (a release commit of
                # its own): within seconds, while the leases run 60 s, so this cannot be a lease
                # expiry. (A cancel 5 s into the stop, as before, could cross an answer already
                # sent by the server, whose jobs then stayed RESERVED: the CI failure under load.)
                wait_for(lambda: stats(admin)["reserved"] == 0, timeout=10,
                         what=f"round {n}: nothing RESERVED after the stop\n{err.read_text()}")
                after = stats(admin)
                assert after["ready"] + after["completed"] == enqueued, f"round {n}: {after}"
                assert after["ready"] > 0, f"round {n}: the worker drained everything before SIGTERM"
    finally:
        admin.close()


@pytest.mark.sqlite_only(reason="backend-neutral: the Worker runtime's stop")
async def test_a_stop_before_the_run_started_makes_the_run_return_at_once(server: ServerProcess) -> None:
    """``create_task(worker.run())`` then ``stop()`` at once (the run has not started yet, as
    a supervisor that is told to stop while it starts its workers does): the run returns
    without reserving anything — it used to raise ``RuntimeError("a Worker runs once")``."""
    with wire_for(server) as w:
        w.enqueue()
    worker = Worker(server.grpc_target, ["q"], prefetch=0)
    worker.register("t", lambda job: None)
    run = asyncio.create_task(worker.run(install_signal_handlers=False))
    await worker.stop()
    await asyncio.wait_for(run, 5)
    assert not worker.running and worker.stats["reserve_calls"] == 0
    with pytest.raises(RuntimeError):   # still one run per Worker
        await worker.run(install_signal_handlers=False)
    with AdminClient(server.grpc_target) as admin:
        assert stats(admin)["ready"] == 1


@pytest.mark.sqlite_only(reason="backend-neutral: the Worker runtime's stop")
async def test_many_stop_calls_at_once_stop_once_and_leave_nothing_reserved(server: ServerProcess) -> None:
    """20 concurrent ``stop()`` calls (the last few hurried, ``grace=0``) on a worker with jobs
    running and prefetched: every call returns once the one stop is done, and no job is left
    RESERVED (the running ones finish or are released, the prefetched ones released)."""
    gate = Gate()

    with wire_for(server) as w:
        for _ in range(12):
            w.enqueue()
    worker = Worker(server.grpc_target, ["q"], concurrency=4, prefetch=4, shutdown_grace=5.0)
    worker.register("t", gate.handler)
    run = asyncio.create_task(worker.run(install_signal_handlers=False))
    await until(lambda: gate.started >= 4, 10, "4 jobs running")
    stops = [asyncio.create_task(worker.stop(0 if i >= 17 else None)) for i in range(20)]
    await asyncio.wait_for(asyncio.gather(*stops), 15)
    await asyncio.wait_for(run, 5)
    assert not worker.running
    with AdminClient(server.grpc_target) as admin:
        s = stats(admin)
    assert s["reserved"] == 0 and s["ready"] + s["completed"] == 12, s
