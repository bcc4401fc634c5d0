"""The Node.js example worker (examples/node/worker.js) against a real ``sepp serve``: the
worker protocol of docs/other-languages.md works from another language with nothing but
the .proto files of proto/.

The server has tokens on, so the worker's ``authorization`` header is exercised; the jobs
cover an ack, a nack with the queue's backoff on the last attempt (ATTEMPTS_EXHAUSTED), a
dead-letter for a type with no handler (NACK_DEAD_LETTER), lease extension and an admin's
cancel learnt through ``ExtendLease``, and a graceful stop (StopReserving, the worker listed
as stopped). A second worker with a wrong token shows the ErrorInfo reason decoded from
``grpc-status-details-bin``.

Node.js and npm are needed: the npm packages are installed with ``npm ci`` (the committed
package-lock.json) when examples/node/node_modules is missing. Without node or npm the test
is skipped on a developer machine and FAILS in CI (``CI=true``): CI must run it.
"""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.auth import TOKENS, auth_config
from support.node import NODE_DIR, node_with_packages
from support.servers import ServerFactory
from support.waiting import wait_for

from sepp import Client, EnqueueRequest, Payload
from sepp.api.v1 import common_pb2 as pb
from sepp.client.admin import AdminClient
from sepp.testing import ServerProcess

pytestmark = pytest.mark.sqlite_only(reason="the worker protocol does not depend on the storage backend")

QUEUE = "node-demo"
LEASE = 2  # seconds: the worker extends every 2/3 s, so the test sees extensions quickly


@pytest.fixture(scope="module")
def node() -> str:
    """The node binary, with examples/node's packages installed (``support.node``)."""
    return node_with_packages("the Node.js example worker's test")


@pytest.fixture
def locked(server_factory: ServerFactory) -> ServerProcess:
    return server_factory(auth_config())


def _start(node: str, server: ServerProcess, token: str, out: Path) -> subprocess.Popen[bytes]:
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("SEPP_")},
           "SEPP_SERVER": server.grpc_target, "SEPP_TOKEN": token, "SEPP_QUEUES": QUEUE,
           "SEPP_CONCURRENCY": "4", "SEPP_LEASE": str(LEASE)}
    return subprocess.Popen([node, str(NODE_DIR / "worker.js")], cwd=NODE_DIR, env=env,
                            stdout=(out / "stdout").open("wb"), stderr=(out / "stderr").open("wb"))


@pytest.fixture
def processes() -> Iterator[list[subprocess.Popen[bytes]]]:
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for proc in started:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)


def test_the_node_worker_acks_nacks_extends_learns_a_cancel_and_stops(
        node: str, locked: ServerProcess, tmp_path: Path, processes: list[subprocess.Popen[bytes]]) -> None:
    with Client(locked.grpc_target, token=TOKENS["producer"][0]) as producer:
        welcome = [producer.enqueue(EnqueueRequest(QUEUE, "welcome", payload=Payload.json({"user_id": i}),
                                                   custom={"vip": i == 2})).job_id for i in (1, 2, 3)]
        flaky = producer.enqueue(EnqueueRequest(QUEUE, "flaky", max_attempts=1)).job_id
        unknown = producer.enqueue(EnqueueRequest(QUEUE, "unknown")).job_id
        report = producer.enqueue(EnqueueRequest(QUEUE, "report")).job_id
    worker = _start(node, locked, TOKENS["worker"][0], tmp_path)
    processes.append(worker)
    with AdminClient(locked.grpc_target, token=TOKENS["admin"][0]) as admin:
        def finished() -> bool:
            states = [admin.get_job(j).state for j in (*welcome, flaky, unknown)]
            return all(s in (pb.COMPLETED, pb.DEAD_LETTERED) for s in states)

        wait_for(finished, timeout=30, interval=0.05, what="the worker to settle the jobs")
        for job_id in welcome:
            job = admin.get_job(job_id)
            assert job.state == pb.COMPLETED and job.attempts[-1].outcome == "completed", job
        failed = admin.get_job(flaky)
        assert failed.state == pb.DEAD_LETTERED and failed.dead_letter_reason == "ATTEMPTS_EXHAUSTED", failed
        assert "the flaky service failed (attempt 1 of 1)" in failed.attempts[-1].error_message
        assert "worker.js" in failed.attempts[-1].error_detail  # the stack, as the error detail
        dead = admin.get_job(unknown)
        assert dead.state == pb.DEAD_LETTERED
        assert dead.dead_letter_reason == "NACK_DEAD_LETTER: no handler registered for job type 'unknown'"

        # The long job: its lease is extended (same lease, later expiry) until an admin cancels it.
        held = wait_for(lambda: (j := admin.get_job(report)).state == pb.RESERVED and j, timeout=10,
                        what="the report job to be reserved")
        first = held.lease_expires_at.ToNanoseconds()
        moved = wait_for(lambda: (j := admin.get_job(report)).lease_expires_at.ToNanoseconds() > first and j,
                         timeout=3 * LEASE, interval=0.05, what="an ExtendLease to move the expiry")
        assert moved.lease_id == held.lease_id and moved.state == pb.RESERVED and moved.attempt == 1
        admin.cancel_job(report, "no longer needed")
        cancelled = wait_for(lambda: (j := admin.get_job(report)).state == pb.CANCELLED and j, timeout=3 * LEASE,
                             interval=0.05, what="the worker to learn the cancel and give the job back")
        assert cancelled.attempts[-1].outcome == "released", cancelled

        worker.send_signal(signal.SIGTERM)
        assert worker.wait(timeout=20) == 0
        stopped = [w for w in admin.list_workers().workers if w.HasField("stopped_at")]
        assert [w.client_version for w in stopped] == ["sepp-node-example/0.1.0"]
        assert list(stopped[0].queues) == [QUEUE] and stopped[0].concurrency == 4
    lines = (tmp_path / "stdout").read_text().splitlines()
    assert sum(" welcome attempt=1/10 completed " in line for line in lines) == 3, lines
    assert any(f"{unknown} unknown attempt=1/10 dead_letter -> dead_lettered" in line for line in lines), lines
    assert "sent welcome mail to user 2 (vip)" in (tmp_path / "stderr").read_text()


def test_the_node_worker_decodes_the_error_reason_of_a_refused_call(
        node: str, locked: ServerProcess, tmp_path: Path, processes: list[subprocess.Popen[bytes]]) -> None:
    worker = _start(node, locked, "not-a-token", tmp_path)
    processes.append(worker)
    log = tmp_path / "stderr"
    # The reason comes from the ErrorInfo in grpc-status-details-bin (grpc-js gives the
    # status as the number 16 only); a refused token stops the worker with exit code 2.
    assert worker.wait(timeout=20) == 2
    assert "reserve refused (UNAUTHENTICATED: " in log.read_text(), log.read_text()
