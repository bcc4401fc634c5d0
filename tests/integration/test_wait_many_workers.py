"""1,000 jobs waited for with ``as_completed`` while two ``sepp worker`` processes run them
and one is killed -9 midway: every job is yielded exactly once, COMPLETED — the jobs the
killed worker held come back when their leases run out and the other worker completes them,
and the wait sees each job's one completion, never a half-done one."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
from collections import Counter
from pathlib import Path

import pytest
from support.servers import ServerFactory
from support.waiting import wait_for
from support.worker import fast_queue, wire_for

from sepp import Client
from sepp.api.v1 import common_pb2 as pb

pytestmark = [pytest.mark.slow, pytest.mark.sqlite_only(reason=(
    "backend-neutral: the client's wait over the engine's wake-ups (both backends in test_client_wait)"))]

HANDLERS = textwrap.dedent('''
    """A handler that marks each job it runs and takes a moment over it."""
    import os
    import time
    from pathlib import Path

    from sepp.worker import Job, Worker

    MARKS = Path(os.environ["MARKS"])
    worker = Worker(queues=["nowhere"], concurrency=4, poll_wait=0.5)


    @worker.handler("n")
    def run(job: Job) -> dict[str, int]:
        (MARKS / f"{job.id}.{job.attempt}").touch()
        time.sleep(0.01)
        return {"n": int(job.payload.decode())}
''')


def test_as_completed_yields_each_of_1000_jobs_once_while_a_worker_is_killed(
        server_factory: ServerFactory, tmp_path: Path) -> None:
    server = server_factory(queues={"q": fast_queue(lease_duration=2.0)})
    with wire_for(server) as w:
        ids: list[str] = []
        for start in range(0, 1000, 250):
            ids += w.enqueue_many([pb.EnqueueRequest(queue="q", job_type="n", payload=pb.Payload(data=str(i).encode()))
                                   for i in range(start, start + 250)])
    (tmp_path / "wait_handlers.py").write_text(HANDLERS, "utf-8")
    marks = tmp_path / "marks"
    marks.mkdir()
    env = {**os.environ, "MARKS": str(marks), "PYTHONUNBUFFERED": "1"}
    cmd = [sys.executable, "-m", "sepp", "worker", "wait_handlers:worker", "--quiet", "--server",
           server.grpc_target, "--queues", "q"]
    seen: list[str] = []
    states: Counter[str] = Counter()
    done = threading.Event()

    def wait() -> None:
        with Client(server.grpc_target) as client:
            for outcome in client.as_completed(ids, timeout=120):
                seen.append(outcome.job_id)
                states[outcome.state] += 1
        done.set()

    waiter = threading.Thread(target=wait, daemon=True)
    waiter.start()
    workers = [subprocess.Popen(cmd, cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
               for _ in range(2)]
    try:
        wait_for(lambda: len(seen) >= 300, timeout=60, what="300 jobs completed")
        workers[0].send_signal(signal.SIGKILL)
        workers[0].wait(10)
        assert done.wait(120), f"only {len(seen)} of 1000 jobs were yielded"
    finally:
        for proc in workers:
            if proc.poll() is None:
                proc.kill()
                proc.wait(10)
    assert len(seen) == 1000 and set(seen) == set(ids), (len(seen), len(set(seen)))
    assert states == {"COMPLETED": 1000}
