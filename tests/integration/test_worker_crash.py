"""Crashes on either side (SPEC §5, §6): a SIGKILLed worker's job comes back after its lease;
an acked job survives a server SIGKILL as COMPLETED; a reservation survives a server
restart and its lease still settles the job. The worker runs as a real ``sepp worker``
process here, so the CLI is exercised too.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.servers import ServerFactory
from support.waiting import wait_for
from support.worker import count_states, fast_queue, job_row, wire_for

from sepp.api.v1 import common_pb2 as pb
from sepp.api.v1 import worker_pb2 as wpb
from sepp.testing import ServerProcess

pytestmark = pytest.mark.slow

WORKER_MODULE = textwrap.dedent('''
    """Handlers for the crash tests: ``marker`` files show what started."""
    import asyncio
    import os
    from pathlib import Path

    from sepp.worker import Job, Worker

    MARKS = Path(os.environ["MARKS"])
    worker = Worker(queues=["nowhere"], concurrency=4, poll_wait=0.5)


    @worker.handler("hang")
    async def hang(job: Job) -> None:
        (MARKS / f"{job.id}.{job.attempt}").touch()
        await asyncio.sleep(3600)


    @worker.handler("quick")
    def quick(job: Job) -> None:
        (MARKS / f"{job.id}.{job.attempt}").touch()


    @worker.handler("slow")
    async def slow(job: Job) -> None:
        (MARKS / f"{job.id}.{job.attempt}").touch()
        await asyncio.sleep(float(job.custom.get("seconds", 1.0)))
''')


class WorkerProcess:
    """``sepp worker crash_handlers:worker --json`` in a child process."""

    def __init__(self, tmp: Path, server: ServerProcess, *extra: str) -> None:
        (tmp / "crash_handlers.py").write_text(WORKER_MODULE, "utf-8")
        self.marks = tmp / "marks"
        self.marks.mkdir(exist_ok=True)
        env = {**os.environ, "MARKS": str(self.marks), "PYTHONUNBUFFERED": "1"}
        self.out_path = tmp / f"worker-{time.monotonic_ns()}.out"
        self.err_path = self.out_path.with_suffix(".err")
        cmd = [sys.executable, "-m", "sepp", "worker", "crash_handlers:worker", "--json", "--server",
               server.grpc_target, "--queues", "q", *extra]
        self.proc = subprocess.Popen(cmd, cwd=tmp, env=env, stdout=self.out_path.open("w"),
                                     stderr=self.err_path.open("w"))

    def started(self, job_id: str, attempt: int = 1) -> bool:
        return (self.marks / f"{job_id}.{attempt}").exists()

    def reports(self) -> list[dict[str, object]]:
        """The outcome lines written so far; a line still being written (no newline yet: the
        worker's unbuffered stdout may write a line in parts) is not one yet."""
        text = self.out_path.read_text()
        return [json.loads(line) for line in text[:text.rfind("\n") + 1].splitlines() if line.strip()]

    def stderr(self) -> str:
        return self.err_path.read_text()

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)


@pytest.fixture
def workers(tmp_path: Path) -> Iterator[list[WorkerProcess]]:
    started: list[WorkerProcess] = []
    yield started
    for w in started:
        w.stop()


def test_a_sigkilled_workers_job_is_delivered_again_after_its_lease(
        server_factory: ServerFactory, tmp_path: Path, workers: list[WorkerProcess]) -> None:
    # A 1.5 s lease, extended every 0.5 s: a worker process stalled for up to 1 s by a loaded
    # machine still keeps it.
    lease = 1.5
    server = server_factory(queues={"q": fast_queue(lease_duration=lease)})
    with wire_for(server) as w:
        job_id = w.enqueue("q", "hang", max_attempts=5)
    worker = WorkerProcess(tmp_path, server)
    workers.append(worker)
    wait_for(lambda: worker.started(job_id), timeout=15, what="the worker to start the job")
    time.sleep(lease + 0.5)  # longer than the lease: the worker keeps extending it
    with wire_for(server) as w:
        assert w.reserve(wait=0) == [], "the running job's lease must be kept alive"
    worker.proc.send_signal(signal.SIGKILL)
    worker.proc.wait(10)
    killed_at = time.monotonic()
    with wire_for(server) as w:
        res = w.reserve_one(wait=12.0)
    # Redelivered at the lease's end (1.5 s) plus a sweep; the bound leaves a loaded machine room
    # and stays well below the 12 s long-poll, which a job never redelivered would wait out.
    assert time.monotonic() - killed_at < lease + 5.0
    assert res.job.id == job_id and res.attempt == 2
    assert [a.outcome for a in res.job.attempts] == ["lease_expired"]


def test_an_acked_job_is_not_delivered_again_after_a_server_sigkill(
        server_factory: ServerFactory, tmp_path: Path, workers: list[WorkerProcess]) -> None:
    # A lost ack would leave its job RESERVED (or, its lease run out, delivered again): the
    # counts below tell. The lease is long enough for a worker process a loaded machine stalls.
    server = server_factory(queues={"q": fast_queue(lease_duration=5.0)})
    with wire_for(server) as w:
        ids = w.enqueue_many([pb.EnqueueRequest(queue="q", job_type="quick") for _ in range(100)])
    worker = WorkerProcess(tmp_path, server, "--concurrency", "16", "--prefetch", "16")
    workers.append(worker)
    wait_for(lambda: len(worker.reports()) == 100, timeout=20, what="100 outcomes")
    assert {r["state"] for r in worker.reports()} == {"completed"}
    worker.stop()
    server.kill()  # SIGKILL right after the acks were answered
    server.start()
    with wire_for(server) as w:
        assert w.reserve(max_jobs=100, wait=1.0) == []
    assert count_states(server) == {"COMPLETED": 100}
    assert all((r := job_row(server, i)) is not None and r.attempt == 1 for i in ids)


def test_raw_acks_survive_a_server_sigkill(server_factory: ServerFactory) -> None:
    # A lost ack would leave its job RESERVED: the counts tell. A 30 s lease, so that a loaded
    # machine's slow acks cannot outlast it.
    server = server_factory(queues={"q": fast_queue(lease_duration=30.0)})
    with wire_for(server) as w:
        w.enqueue_many([pb.EnqueueRequest(queue="q", job_type="t") for _ in range(20)])
        got = w.reserve(max_jobs=20)
        assert len(got) == 20
        for r in got[:5]:
            w.ack(r)
        results = w.settle([wpb.SettleItem(ack=wpb.AckRequest(job_id=r.job.id, lease_id=r.lease_id))
                            for r in got[5:]])
        assert all(r.ok for r in results)
    server.kill()
    server.start()
    with wire_for(server) as w:
        assert w.reserve(max_jobs=20, wait=0.8) == []
    assert count_states(server) == {"COMPLETED": 20}


@pytest.mark.parametrize("how", ["sigkill", "graceful"])
def test_a_reservation_survives_a_server_restart_and_its_lease_still_settles_the_job(
        server_factory: ServerFactory, how: str) -> None:
    server = server_factory(queues={"q": fast_queue(lease_duration=30.0)})
    with wire_for(server) as w:
        done, extended, nacked = (w.enqueue(max_attempts=3) for _ in range(3))
        held = {r.job.id: r for r in w.reserve(max_jobs=3)}
    if how == "sigkill":
        server.kill()
        server.start()
    else:
        server.restart()
    with wire_for(server) as w:
        assert w.reserve(wait=0.2) == [], "the reservations must survive the restart"
        w.ack(held[done])
        assert w.nack(held[nacked], "retry_after", delay=0.0).state == pb.READY
        again = w.reserve(max_jobs=3, wait=2.0)
        assert {r.job.id: r.attempt for r in again} == {nacked: 2}
        # Shortened after the Reserve above, so that its 0.2 s cannot run out before it.
        resp = w.extend(held[extended], 0.2)
        assert resp.lease_expires_at.ToMicroseconds() / 1e6 < time.time() + 0.5
        back = w.reserve_one(wait=10.0)  # the extended one's shortened lease ran out
        assert (back.job.id, back.attempt) == (extended, 2)
    row = job_row(server, done)
    assert row is not None and (row.state, row.attempt) == ("COMPLETED", 1)


def test_sigterm_drains_a_worker_process_and_loses_nothing(
        server_factory: ServerFactory, tmp_path: Path, workers: list[WorkerProcess]) -> None:
    server = server_factory(queues={"q": fast_queue(lease_duration=2.0)})
    with wire_for(server) as w:
        ids = w.enqueue_many([pb.EnqueueRequest(queue="q", job_type="slow",
                                                custom={"seconds": pb.CustomValue(float_value=0.8)})
                              for _ in range(12)])
    worker = WorkerProcess(tmp_path, server, "--concurrency", "3", "--prefetch", "3", "--shutdown-grace", "5")
    workers.append(worker)
    wait_for(lambda: sum(worker.started(i) for i in ids) == 3, timeout=15, what="3 running jobs")
    wait_for(lambda: count_states(server).get("RESERVED") == 6, timeout=15, what="6 held jobs")
    worker.proc.send_signal(signal.SIGTERM)
    assert worker.proc.wait(10) == 0, worker.stderr()
    outcomes = sorted(str(r["outcome"]) for r in worker.reports())
    assert outcomes == ["completed"] * 3 + ["released"] * 3
    assert count_states(server) == {"COMPLETED": 3, "READY": 9}
    started = [i for i in ids if worker.started(i)]
    assert len(started) == 3 and not any(worker.started(i, 2) for i in ids)
    assert "stopped" in worker.stderr()
