"""``sepp worker module:attr``: flags override the Worker, one clean line per outcome, usage errors."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest
from support.servers import ServerFactory
from support.waiting import wait_for
from support.worker import wire_for

from sepp.api.v1 import common_pb2 as pb
from sepp.cli.worker_cmd import LINE_RATE
from sepp.client.admin import AdminClient
from sepp.testing import ServerProcess

pytestmark = pytest.mark.sqlite_only(reason=(
    "backend-neutral: the sepp worker command's flags and output lines, the same on both "
    "backends"))

MODULE = textwrap.dedent('''
    from sepp.worker import Job, Worker

    worker = Worker("127.0.0.1:1", queues=["not-this-one"], concurrency=1)

    @worker.handler("ok")
    async def ok(job: Job) -> None:
        pass

    @worker.handler("fail")
    async def fail(job: Job) -> None:
        raise ValueError("no luck")

    def make_worker() -> Worker:
        return worker

    not_a_worker = 42
''')


def sepp_worker(tmp_path: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    (tmp_path / "cli_handlers.py").write_text(MODULE, "utf-8")
    env = {**{k: v for k, v in os.environ.items() if k != "SEPP_SERVER"}, "PYTHONUNBUFFERED": "1", **(env or {})}
    return subprocess.Popen([sys.executable, "-m", "sepp", "worker", *args], cwd=tmp_path, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


@pytest.mark.parametrize(("spec", "message"), [
    ("cli_handlers", "expected MODULE:ATTRIBUTE"),
    ("no_such_module:worker", "cannot import module 'no_such_module'"),
    ("no_such_module:worker", "add that folder to PYTHONPATH"),
    ("cli_handlers:nope", "has no attribute 'nope'"),
    # a typo names what there is to run (the Worker; not the function, nor the int)
    ("cli_handlers:wroker", "module 'cli_handlers' has no attribute 'wroker'; App or Worker objects there: worker\n"),
    ("cli_handlers:worker.nope", "has no attribute 'worker.nope'; it holds no App or Worker object"),
    ("cli_handlers:not_a_worker", "is a int, not a sepp.worker.Worker"),
])
def test_a_bad_target_is_a_usage_error(tmp_path: Path, spec: str, message: str) -> None:
    proc = sepp_worker(tmp_path, spec)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 2
    assert message in err and out == ""


def test_flags_override_the_worker_and_each_outcome_is_one_line(server_factory: ServerFactory,
                                                                tmp_path: Path) -> None:
    server = server_factory(queues={"jobs": {"retry_base": 0.05, "retry_jitter": 0.0}})
    with wire_for(server) as w:
        ok = w.enqueue("jobs", "ok")
        fail = w.enqueue("jobs", "fail", max_attempts=2)
        unknown = w.enqueue("jobs", "mystery")
    proc = sepp_worker(tmp_path, "cli_handlers:make_worker", "--server", server.grpc_target, "--queues", "jobs",
                       "--concurrency", "2")
    lines: list[str] = []
    stdout = proc.stdout
    assert stdout is not None

    def four_lines() -> bool:
        lines.append(stdout.readline().rstrip("\n"))
        return len(lines) >= 4

    try:
        wait_for(four_lines, timeout=20, what="four outcome lines")
    finally:
        proc.send_signal(signal.SIGTERM)
        rest, err = proc.communicate(timeout=20)
    assert proc.returncode == 0, err
    assert rest == ""
    by_id = {line.split()[1]: line for line in lines}
    pattern = r"^\d\d:\d\d:\d\d\.\d\d\d {id} {type} attempt={a} {outcome} \d+\.\dms{error}$"
    assert re.match(pattern.format(id=ok, type="ok", a="1/10", outcome="completed", error=""), by_id[ok])
    fail_lines = [line for line in lines if fail in line]
    assert re.match(pattern.format(id=fail, type="fail", a="1/2", outcome=r"retry in 0\.\d\ds",
                                   error=' error="ValueError: no luck"'), fail_lines[0])
    assert re.match(pattern.format(id=fail, type="fail", a="2/2", outcome=r"dead_lettered \(attempts exhausted\)",
                                   error=' error="ValueError: no luck"'), fail_lines[1])
    assert re.match(pattern.format(id=unknown, type="mystery", a="1/10", outcome="dead_lettered",
                                   error=' error="no handler registered for job type \'mystery\'"'), by_id[unknown])
    assert "queues=jobs concurrency=2" in err and "stopped" in err


def test_sepp_server_is_honoured_like_every_other_command(server_factory: ServerFactory, tmp_path: Path) -> None:
    """A new user's report: ``SEPP_SERVER`` was ignored and the Worker's own target
    (here a closed port) was used. ``--server`` still beats the variable."""
    server = server_factory()
    with wire_for(server) as w:
        job = w.enqueue("jobs", "ok")
    for args, env in (((), {"SEPP_SERVER": server.grpc_target}),
                      (("--server", server.grpc_target), {"SEPP_SERVER": "127.0.0.1:1"})):
        proc = sepp_worker(tmp_path, "cli_handlers:make_worker", "--queues", "jobs", *args, env=env)
        stdout = proc.stdout
        assert stdout is not None
        watchdog = threading.Timer(20, proc.kill)  # the wrong target prints nothing: fail, do not hang
        watchdog.start()
        try:
            line = stdout.readline()
        finally:
            watchdog.cancel()
            proc.send_signal(signal.SIGTERM)
            _, err = proc.communicate(timeout=20)
        assert proc.returncode == 0, err
        assert f" {job} ok attempt=1/10 completed " in line, (line, err)
        with wire_for(server) as w:
            job = w.enqueue("jobs", "ok")


def _stats(admin: AdminClient, queue: str) -> dict[str, int]:
    (s,) = admin.queue_stats([queue])
    return {"completed": int(s.completed), "dead_lettered": int(s.dead_lettered), "reserved": int(s.reserved)}


def run_until(server: ServerProcess, tmp_path: Path, done: dict[str, int], *flags: str) -> tuple[list[str], str, float]:
    """Run ``sepp worker`` on queue ``jobs`` until the admin stats reach ``done``, then SIGTERM;
    returns (stdout lines, stderr, seconds it ran). Output goes to files: a pipe nobody reads
    would fill and block the worker."""
    (tmp_path / "cli_handlers.py").write_text(MODULE, "utf-8")
    out_path, err_path = tmp_path / "worker.out", tmp_path / "worker.err"
    started = time.monotonic()
    with out_path.open("w") as out, err_path.open("w") as err:
        proc = subprocess.Popen([sys.executable, "-m", "sepp", "worker", "cli_handlers:make_worker", "--server",
                                 server.grpc_target, "--queues", "jobs", *flags], cwd=tmp_path,
                                env={**os.environ, "PYTHONUNBUFFERED": "1"}, text=True, stdout=out, stderr=err)
    admin = AdminClient(server.grpc_target)
    try:
        wait_for(lambda: {k: v for k, v in _stats(admin, "jobs").items() if k in done} == done, timeout=60,
                 interval=0.05, what=f"stats {done}")
    finally:
        admin.close()
        proc.send_signal(signal.SIGTERM)
        proc.wait(30)
    assert proc.returncode == 0, err_path.read_text()
    return out_path.read_text().splitlines(), err_path.read_text(), time.monotonic() - started


SUMMARY = re.compile(r"^\d\d:\d\d:\d\d\.\d\d\d completed ([\d,]+) jobs in the last \d+\.\d s$")


def test_at_a_high_rate_successes_are_summarised_and_failures_keep_their_lines(
        server_factory: ServerFactory, tmp_path: Path) -> None:
    server = server_factory(queues={"jobs": {"retry_base": 0.05, "retry_jitter": 0.0}})
    n = 3000
    with wire_for(server) as w:
        for _ in range(n // 250):
            w.enqueue_many([pb.EnqueueRequest(queue="jobs", job_type="ok") for _ in range(250)])
        failing = {w.enqueue("jobs", "fail", max_attempts=1) for _ in range(3)}
    lines, _err, seconds = run_until(server, tmp_path, {"completed": n, "dead_lettered": 3}, "--concurrency", "64")
    per_job = [line for line in lines if re.search(r" ok attempt=1/10 completed ", line)]
    summarised = [int(m[1].replace(",", "")) for line in lines if (m := SUMMARY.match(line))]
    assert summarised, "no summary line at a high rate"
    assert len(per_job) + sum(summarised) == n  # every success is either a line or counted
    assert len(per_job) <= LINE_RATE * (int(seconds) + 2)
    dead = [line for line in lines if "dead_lettered (attempts exhausted)" in line]
    assert {line.split()[1] for line in dead} == failing  # failures are never summarised away
    assert len(lines) == len(per_job) + len(summarised) + len(dead)


def test_quiet_prints_failures_and_dead_letters_only(server_factory: ServerFactory, tmp_path: Path) -> None:
    server = server_factory(queues={"jobs": {"retry_base": 0.05, "retry_jitter": 0.0}})
    with wire_for(server) as w:
        w.enqueue_many([pb.EnqueueRequest(queue="jobs", job_type="ok") for _ in range(20)])
        fail = w.enqueue("jobs", "fail", max_attempts=2)
        unknown = w.enqueue("jobs", "mystery")
    lines, err, _ = run_until(server, tmp_path, {"completed": 20, "dead_lettered": 2},
                              "--quiet", "--log-level", "warning")
    assert sorted((line.split()[1], line.split()[4]) for line in lines) == sorted(
        [(fail, "retry"), (fail, "dead_lettered"), (unknown, "dead_lettered")])
    assert "INFO" not in err and "queues=jobs" not in err


def test_a_bad_log_level_is_a_usage_error(tmp_path: Path) -> None:
    proc = sepp_worker(tmp_path, "cli_handlers:worker", "--log-level", "chatty")
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 2 and "--log-level must be" in err and out == ""


def test_a_bad_log_format_is_a_usage_error(tmp_path: Path) -> None:
    proc = sepp_worker(tmp_path, "cli_handlers:worker", "--log-format", "xml")
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 2 and "--log-format must be text or json, not 'xml'" in err and out == ""


def test_log_format_json_makes_every_stderr_line_a_json_object(server_factory: ServerFactory,
                                                               tmp_path: Path) -> None:
    """``--log-format json`` (here through ``SEPP_LOG_FORMAT``) for a worker too."""
    server = server_factory(queues={"jobs": {}})
    with wire_for(server) as w:
        w.enqueue("jobs", "ok")
    (tmp_path / "cli_handlers.py").write_text(MODULE, "utf-8")
    with (tmp_path / "worker.err").open("w") as err_file:
        worker = subprocess.Popen([sys.executable, "-m", "sepp", "worker", "cli_handlers:make_worker", "--server",
                                   server.grpc_target, "--queues", "jobs"], cwd=tmp_path, text=True,
                                  stdout=subprocess.PIPE, stderr=err_file,
                                  env={**os.environ, "PYTHONUNBUFFERED": "1", "SEPP_LOG_FORMAT": "json"})
        assert worker.stdout is not None
        watchdog = threading.Timer(20, worker.kill)
        watchdog.start()
        try:
            line = worker.stdout.readline()  # the job's outcome line (stdout keeps its format)
        finally:
            watchdog.cancel()
            worker.send_signal(signal.SIGTERM)
            worker.communicate(timeout=20)
    assert worker.returncode == 0 and " ok attempt=1/10 completed " in line
    entries = [json.loads(text) for text in (tmp_path / "worker.err").read_text().splitlines()]
    assert entries and entries[-1]["msg"].endswith(" stopped")
    for entry in entries:
        assert {"ts", "level", "logger", "node", "msg"} <= entry.keys()
        assert entry["logger"] == "sepp.worker" and re.fullmatch(r".+:\d+", entry["node"])  # host:pid


def test_json_prints_every_job_whatever_the_rate(server_factory: ServerFactory, tmp_path: Path) -> None:
    server = server_factory(queues={"jobs": {}})
    n = 1000
    with wire_for(server) as w:
        for _ in range(n // 250):
            w.enqueue_many([pb.EnqueueRequest(queue="jobs", job_type="ok") for _ in range(250)])
    lines, _err, seconds = run_until(server, tmp_path, {"completed": n}, "--concurrency", "64", "--json")
    assert n > LINE_RATE * (int(seconds) + 2)  # a rate at which text lines would be summarised
    records = [json.loads(line) for line in lines]
    assert len(records) == n and {r["outcome"] for r in records} == {"completed"}
