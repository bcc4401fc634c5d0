"""What the history of a job a stopping worker gave back says: why it was released.

A new user pressed Ctrl-C twice during ``sepp worker``'s drain (the first starts it, the second
forces the stop) and read "shutdown grace exceeded" in the jobs' history — wrong, the operator
stopped it. The release now names what stopped the handler:

* a second SIGINT → "worker stopped by a second interrupt (SIGINT) before the handler finished";
* the grace period running out → "… (shutdown grace exceeded)", as before;
* ``Worker.stop(0)`` → "worker stopped by stop(0) before the handler finished".

The handlers never end by themselves; each writes a marker file once it runs, and the test
signals only then (no sleeps).
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from support.interrupting import with_default_sigint
from support.servers import ServerFactory
from support.waiting import wait_for
from support.worker import wire_for

from sepp.api.v1 import common_pb2 as pb
from sepp.client.admin import AdminClient
from sepp.testing import ServerProcess
from sepp.worker import Job, Worker
from sepp.worker._shutdown import abandon_reason

pytestmark = [pytest.mark.timeout(120), pytest.mark.sqlite_only(
    reason="backend-neutral: the worker's release reason, sent as any nack is")]

MODULE = textwrap.dedent('''
    import asyncio
    from pathlib import Path

    from sepp.worker import Job, Worker

    worker = Worker("127.0.0.1:1", queues=["jobs"], concurrency=1)

    @worker.handler("forever")
    async def forever(job: Job) -> None:
        Path("started").write_text(job.id)
        await asyncio.Event().wait()
''')

SECOND_INTERRUPT = "worker stopped by a second interrupt (SIGINT) before the handler finished"
GRACE_EXCEEDED = "worker stopped before the handler finished (shutdown grace exceeded)"


def last_attempt(server: ServerProcess, job_id: str) -> pb.Attempt:
    """The job's last attempt, once it is READY again (its release applied)."""
    with AdminClient(server.grpc_target) as admin:
        job = wait_for(lambda: (j := admin.get_job(job_id)).state == pb.READY and j, timeout=30,
                       what="the job released")
    return job.attempts[-1]


def start_worker(tmp_path: Path, server: ServerProcess, *flags: str) -> tuple[subprocess.Popen[bytes], Path]:
    """``sepp worker`` on queue ``jobs`` with the module above; stderr goes to a file (returned)."""
    (tmp_path / "stop_handlers.py").write_text(MODULE, "utf-8")
    err = tmp_path / "worker.err"
    env = {**{k: v for k, v in os.environ.items() if k != "SEPP_SERVER"}, "PYTHONUNBUFFERED": "1"}
    with err.open("wb") as stderr:
        proc = subprocess.Popen(with_default_sigint([sys.executable, "-m", "sepp", "worker", "stop_handlers:worker",
                                                     "--server", server.grpc_target, *flags]),
                                cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=stderr)
    return proc, err


def test_a_second_interrupt_is_named_in_the_history_not_the_grace(server_factory: ServerFactory,
                                                                   tmp_path: Path) -> None:
    server = server_factory(queues={"jobs": {"lease_duration": 60.0}})
    with wire_for(server) as w:
        job_id = w.enqueue("jobs", "forever")
    proc, err = start_worker(tmp_path, server, "--shutdown-grace", "600")
    try:
        wait_for(lambda: (tmp_path / "started").exists(), timeout=30, what="the handler running")
        proc.send_signal(signal.SIGINT)
        wait_for(lambda: "SIGINT: stopping" in err.read_text(), timeout=30, what="the graceful stop begun")
        proc.send_signal(signal.SIGINT)
        assert proc.wait(60) == 0, err.read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    attempt = last_attempt(server, job_id)
    assert (attempt.outcome, attempt.error_message) == ("released", SECOND_INTERRUPT)
    assert "grace" not in attempt.error_message


def test_a_grace_that_runs_out_still_says_so(server_factory: ServerFactory, tmp_path: Path) -> None:
    server = server_factory(queues={"jobs": {"lease_duration": 60.0}})
    with wire_for(server) as w:
        job_id = w.enqueue("jobs", "forever")
    proc, err = start_worker(tmp_path, server, "--shutdown-grace", "0.2")
    try:
        wait_for(lambda: (tmp_path / "started").exists(), timeout=30, what="the handler running")
        proc.send_signal(signal.SIGINT)
        assert proc.wait(60) == 0, err.read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    attempt = last_attempt(server, job_id)
    assert (attempt.outcome, attempt.error_message) == ("released", GRACE_EXCEEDED)


async def test_stop_with_no_grace_is_named_too(server_factory: ServerFactory) -> None:
    server = server_factory(queues={"jobs": {"lease_duration": 60.0}})
    with wire_for(server) as w:
        job_id = w.enqueue("jobs", "forever")
    worker = Worker(server.grpc_target, ["jobs"], concurrency=1, poll_wait=0.5)
    started = asyncio.Event()

    @worker.handler("forever")
    async def forever(job: Job) -> None:
        started.set()
        await asyncio.Event().wait()

    run = asyncio.create_task(worker.run(install_signal_handlers=False))
    await asyncio.wait_for(started.wait(), 30)
    await worker.stop(0)
    await asyncio.wait_for(run, 30)
    attempt = await asyncio.to_thread(last_attempt, server, job_id)
    assert (attempt.outcome, attempt.error_message) == ("released",
                                                        "worker stopped by stop(0) before the handler finished")


def test_the_reason_of_a_handler_that_ignores_its_cancellation() -> None:
    assert abandon_reason("", ended=False) == "worker stopped; the handler did not end (shutdown grace exceeded)"
    assert abandon_reason("a second SIGTERM", ended=False) == ("worker stopped by a second SIGTERM; the handler "
                                                               "did not end")
    assert abandon_reason("") == GRACE_EXCEEDED
