"""``sepp jobs result ID [--wait D] [--json]`` in subprocesses against a real server: a
completed job prints its result (exit 0), a dead-lettered one its last error and attempts
(exit 1), an unfinished one exits 4 after its wait, an unknown id exits 2, a bad --wait 2."""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator

import pytest
from support.servers import module_server
from support.worker import Wire

from sepp.testing import ServerProcess


def sepp(*args: str, server: str) -> subprocess.CompletedProcess[str]:
    """Run ``sepp ARGS --server SERVER`` without a terminal (as tests/acceptance/test_cli_admin.py)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SEPP_")} | {"COLUMNS": "200"}
    return subprocess.run([sys.executable, "-m", "sepp", *args, "--server", server], capture_output=True, text=True,
                          env=env, timeout=60, input="")

pytestmark = pytest.mark.sqlite_only(reason="backend-neutral: the CLI over the client's wait (tests/integration)")


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory, backend: str) -> Iterator[ServerProcess]:
    yield from module_server(tmp_path_factory, backend)


def test_a_completed_job_prints_its_outcome(srv: ServerProcess) -> None:
    w = Wire(srv.grpc_target, queue="cli-result")
    try:
        job_id = w.enqueue()
        res = w.reserve_one()
        unfinished = sepp("jobs", "result", job_id, "--json", server=srv.grpc_target)
        assert unfinished.returncode == 4, unfinished.stderr
        doc = json.loads(unfinished.stderr)
        assert (doc["error"], doc["state"], doc["queue"], doc["no_consumer"]) == (
            "not_finished", "RESERVED", "cli-result", False)
        assert doc["message"] == f"job {job_id} is not finished (state RESERVED, queue 'cli-result')"

        def ack_soon() -> None:
            time.sleep(1.0)  # after the command started waiting: the wait is the test's subject
            w.ack(res)

        threading.Thread(target=ack_soon, daemon=True).start()
        done = sepp("jobs", "result", job_id, "--wait", "30s", "--json", server=srv.grpc_target)
        assert done.returncode == 0, done.stderr
        data = json.loads(done.stdout)
        assert (data["job_id"], data["state"], data["attempt"], data["result"]) == (job_id, "COMPLETED", 1, None)
        human = sepp("jobs", "result", job_id, server=srv.grpc_target)
        assert human.returncode == 0 and "COMPLETED" in human.stdout and "result: (none)" in human.stdout
    finally:
        w.close()


def test_a_dead_lettered_job_exits_1_with_its_last_error(srv: ServerProcess) -> None:
    w = Wire(srv.grpc_target, queue="cli-result-dead")
    try:
        job_id = w.enqueue()
        w.nack(w.reserve_one(), "dead_letter", reason="bad input", message="ValueError: x")
    finally:
        w.close()
    out = sepp("jobs", "result", job_id, "--json", server=srv.grpc_target)
    assert out.returncode == 1, out.stderr
    data = json.loads(out.stdout)
    assert data["state"] == "DEAD_LETTERED" and data["last_error"] == "ValueError: x"
    assert [a["outcome"] for a in data["attempts"]] == ["dead_letter"]
    human = sepp("jobs", "result", job_id, server=srv.grpc_target)
    assert human.returncode == 1 and "ValueError: x" in human.stdout and "DEAD_LETTERED" in human.stdout


def test_an_unknown_id_and_a_bad_wait_exit_2(srv: ServerProcess) -> None:
    unknown = "0190f1c2-0000-7000-8000-0000000000bb"
    out = sepp("jobs", "result", unknown, "--json", server=srv.grpc_target)
    assert out.returncode == 2 and json.loads(out.stderr) == {
        "error": "not_found", "job_id": unknown, "message": json.loads(out.stderr)["message"]}
    assert sepp("jobs", "result", unknown, "--wait", "soon", server=srv.grpc_target).returncode == 2
    assert sepp("jobs", "result", "nope", server=srv.grpc_target).returncode == 2


def test_a_wait_that_times_out_names_the_seconds_the_state_and_an_idle_queue(srv: ServerProcess) -> None:
    w = Wire(srv.grpc_target, queue="cli-result-idle")
    try:
        ready = w.enqueue()  # no worker has ever reserved from this queue
        later = w.enqueue(scheduled_at=dt.datetime.now(dt.UTC) + dt.timedelta(hours=1))
        w.reserve(queues=["cli-result-polled"])  # a worker polled this one just now (nothing there)
        polled = w.enqueue("cli-result-polled")
    finally:
        w.close()
    out = sepp("jobs", "result", ready, "--wait", "0.5", server=srv.grpc_target)
    assert out.returncode == 4
    assert (f"job {ready} is not finished after 0.5 s (state READY, queue 'cli-result-idle'): no worker has "
            "reserved from queue 'cli-result-idle' recently") in " ".join(out.stderr.split()), out.stderr
    doc = json.loads(sepp("jobs", "result", later, "--wait", "1", "--json", server=srv.grpc_target).stderr)
    assert (doc["state"], doc["no_consumer"]) == ("SCHEDULED", True)
    assert doc["message"].startswith(f"job {later} is not finished after 1 s (state SCHEDULED")
    doc = json.loads(sepp("jobs", "result", polled, "--wait", "0.2", "--json", server=srv.grpc_target).stderr)
    assert (doc["state"], doc["queue"], doc["no_consumer"]) == ("READY", "cli-result-polled", False)
    assert "no worker" not in doc["message"]
