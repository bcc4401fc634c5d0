"""``sepp queues …`` / ``sepp jobs …`` in subprocesses against a real server (SPEC §4)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from support.servers import backend_config

from sepp.api.v1 import common_pb2 as pb
from sepp.api.v1 import producer_pb2_grpc, worker_pb2_grpc
from sepp.api.v1 import worker_pb2 as wpb
from sepp.testing import ServerProcess
from sepp.testing.process import free_port


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory, backend: str) -> Iterator[ServerProcess]:
    """One server for the module; every test uses its own queues."""
    config = {"sweep_interval": 0.05, **backend_config(backend)}
    with ServerProcess(Path(tmp_path_factory.mktemp("cli-admin")), config) as proc:
        yield proc


def sepp(*args: str, server: str | None = None, env: dict[str, str] | None = None,
         stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    """Run ``sepp`` with ``args`` (``--server`` added when given); never inherits a terminal."""
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("SEPP_")}
    full_env["COLUMNS"] = "200"
    full_env.update(env or {})
    argv = [sys.executable, "-m", "sepp", *args] + (["--server", server] if server else [])
    return subprocess.run(argv, capture_output=True, text=True, env=full_env, timeout=60,
                          input=stdin if stdin is not None else "")


def ok_json(*args: str, server: str) -> Any:
    """Run with ``--json``, expect exit 0, parse stdout."""
    result = sepp(*args, "--json", server=server)
    assert result.returncode == 0, result.stderr + result.stdout
    return json.loads(result.stdout)


def enqueue(target: str, queue: str, **fields: Any) -> str:
    with grpc.insecure_channel(target) as ch:
        ack = producer_pb2_grpc.ProducerServiceStub(ch).Enqueue(pb.EnqueueRequest(queue=queue, job_type="t",
                                                                                  **fields))
        return str(ack.job_id)


def dead_letter(target: str, queue: str, reason: str = "bad") -> str:
    """Enqueue into a fresh queue and dead-letter the job through the worker API."""
    job_id = enqueue(target, queue)
    with grpc.insecure_channel(target) as ch:
        worker = worker_pb2_grpc.WorkerServiceStub(ch)
        (r,) = worker.Reserve(wpb.ReserveRequest(queues=[queue], max_jobs=1, worker_id="cli-test")).reservations
        assert r.job.id == job_id
        worker.Nack(wpb.NackRequest(job_id=job_id, lease_id=r.lease_id, dead_letter=reason,
                                    error=wpb.JobError(message="no luck")))
    return job_id


def test_queues_declare_list_show_pause_resume(srv: ServerProcess) -> None:
    target = srv.grpc_target
    made = ok_json("queues", "declare", "cli:q.1", "--priority", "7", "--lease", "45s",
                   "--allowed-encoding", "application/json", server=target)
    assert made["created"] is True
    assert made["settings"]["default_priority"] == 7 and made["settings"]["lease_duration"] == 45.0
    assert made["settings"]["limits"]["allowed_encodings"] == ["application/json"]
    changed = ok_json("queues", "declare", "cli:q.1", "--max-attempts", "3", server=target)
    assert changed["created"] is False and changed["changed"] == ["default_max_attempts"]
    assert changed["settings"]["default_priority"] == 7  # untouched
    enqueue(target, "cli:q.1", payload=pb.Payload(data=b"{}", encoding="application/json"))
    listed = ok_json("queues", "list", server=target)
    row = next(q for q in listed if q["name"] == "cli:q.1")
    assert row["counts"]["ready"] == 1 and row["oldest_ready_age"] is not None
    shown = ok_json("queues", "show", "cli:q.1", server=target)
    assert shown["declared"] is True and len(shown["throughput"]) == 60
    assert sum(m["enqueued"] for m in shown["throughput"]) == 1
    assert ok_json("queues", "pause", "cli:q.1", server=target)["paused"] is True
    assert ok_json("queues", "resume", "cli:q.1", server=target)["paused"] is False
    human = sepp("queues", "list", server=target)
    assert human.returncode == 0 and "cli:q.1" in human.stdout
    show = sepp("queues", "show", "cli:q.1", server=target)
    assert "lease_duration" in show.stdout and "45s" in show.stdout


def test_destructive_commands_refuse_without_yes_when_nobody_can_answer(srv: ServerProcess) -> None:
    target = srv.grpc_target
    enqueue(target, "cli-purge")
    enqueue(target, "cli-purge")
    refused = sepp("queues", "purge", "cli-purge", server=target)
    assert refused.returncode == 2 and "--yes" in refused.stderr
    assert ok_json("queues", "purge", "cli-purge", "--yes", server=target) == {"queue": "cli-purge", "deleted": 2}
    enqueue(target, "cli-del")
    busy = sepp("queues", "delete", "cli-del", "--yes", "--json", server=target)
    assert busy.returncode == 2 and json.loads(busy.stderr)["reason"] == "QUEUE_NOT_EMPTY"
    gone = ok_json("queues", "delete", "cli-del", "--force", "--yes", server=target)
    assert gone["jobs_deleted"] == 1
    missing = sepp("queues", "show", "cli-del", server=target)
    assert missing.returncode == 2 and "does not exist" in missing.stderr


def test_jobs_list_show_and_page(srv: ServerProcess) -> None:
    target = srv.grpc_target
    ids = [enqueue(target, "cli-jobs", priority=5, idempotency_key=f"key-{i}",
                   payload=pb.Payload(data=b'{"n": 1}', encoding="application/json")) for i in range(5)]
    first = ok_json("jobs", "list", "--queue", "cli-jobs", "--state", "ready", "--limit", "2", server=target)
    assert [j["id"] for j in first["jobs"]] == ids[:2] and first["next_page_token"]
    rest = ok_json("jobs", "list", "--queue", "cli-jobs", "--state", "ready", "--limit", "0",
                   "--page-token", first["next_page_token"], server=target)
    assert [j["id"] for j in rest["jobs"]] == ids[2:] and rest["next_page_token"] is None
    job = ok_json("jobs", "show", ids[0], server=target)
    assert job["payload"] == {"text": '{"n": 1}', "encoding": "application/json", "bytes": 8}
    assert job["state"] == "READY" and job["idempotency_key"] == "key-0"
    by_key = ok_json("jobs", "show", "--queue", "cli-jobs", "--key", "key-3", server=target)
    assert by_key["id"] == ids[3]
    human = sepp("jobs", "show", ids[0], server=target)
    assert human.returncode == 0 and '"n": 1' in human.stdout
    table = sepp("jobs", "list", "--queue", "cli-jobs", server=target)
    assert ids[4] in table.stdout
    bad = sepp("jobs", "list", "--state", "sideways", server=target)
    assert bad.returncode == 2 and "unknown job state" in bad.stderr


def test_jobs_cancel_requeue_and_delete(srv: ServerProcess) -> None:
    target = srv.grpc_target
    job_id = enqueue(target, "cli-cx")
    (cancelled,) = ok_json("jobs", "cancel", job_id, "--reason", "nope", "--yes", server=target)
    assert cancelled["state"] == "CANCELLED"
    (requeued,) = ok_json("jobs", "requeue", job_id, server=target)
    assert requeued == {"id": job_id, "state": "READY", "attempt": 0}
    assert ok_json("jobs", "delete", job_id, "--yes", server=target) == {"deleted": [job_id]}
    missing = sepp("jobs", "show", job_id, "--json", server=target)
    assert missing.returncode == 2 and json.loads(missing.stderr)["reason"] == "JOB_NOT_FOUND"


def test_bulk_requeue_shows_the_dry_run_count_then_redrives(srv: ServerProcess) -> None:
    target = srv.grpc_target
    dead = [dead_letter(target, "cli-dead", reason="flaky") for _ in range(3)]
    dead_letter(target, "cli-dead-other")
    counted = ok_json("jobs", "requeue", "--all-dead", "--queue", "cli-dead", "--dry-run", server=target)
    assert counted == {"matched": 3, "requeued": 0, "dry_run": True}
    no_tty = sepp("jobs", "requeue", "--all-dead", "--queue", "cli-dead", server=target)
    assert no_tty.returncode == 2 and "Requeue 3 of 3" in no_tty.stderr
    done = ok_json("jobs", "requeue", "--all-dead", "--queue", "cli-dead", "--reason", "NACK_DEAD_LETTER",
                   "--after", "1h", "--yes", server=target)
    assert done == {"matched": 3, "requeued": 3, "dry_run": False}
    states = {ok_json("jobs", "show", i, server=target)["state"] for i in dead}
    assert states == {"READY"}
    assert ok_json("jobs", "requeue", "--all-dead", "--queue", "cli-dead-other", "--dry-run",
                   server=target)["matched"] == 1


def test_transport_errors_and_missing_tokens_have_their_exit_codes(server_factory: Any) -> None:
    down = sepp("queues", "list", server=f"127.0.0.1:{free_port()}", env={})
    assert down.returncode == 3 and "cannot reach" in down.stderr
    locked = server_factory(admin_token="tok-1")
    refused = sepp("queues", "list", server=locked.grpc_target)
    assert refused.returncode == 2 and "SEPP_ADMIN_TOKEN" in refused.stderr
    allowed = sepp("queues", "list", "--json", server=locked.grpc_target, env={"SEPP_ADMIN_TOKEN": "tok-1"})
    assert allowed.returncode == 0 and json.loads(allowed.stdout) == []
    via_env = sepp("queues", "list", "--json", env={"SEPP_SERVER": locked.grpc_target, "SEPP_ADMIN_TOKEN": "tok-1"})
    assert via_env.returncode == 0


def test_declare_with_a_duration_past_its_maximum_is_refused_with_field_and_limit(srv: ServerProcess) -> None:
    """3650 days (10 years) is the longest window; one day more is the server's
    INVALID_ARGUMENT naming field, limit and value; a non-finite or absurd value is a usage
    error before any call — never a traceback."""
    target = srv.grpc_target
    assert ok_json("queues", "declare", "cli-max", "--dedup-window", "3650d",
                   server=target)["settings"]["dedup_window"] == 315_360_000
    past = sepp("queues", "declare", "cli-max", "--dedup-window", "3651d", "--json", server=target)
    assert past.returncode == 2, past.stderr + past.stdout
    assert json.loads(past.stderr) == {"error": "--dedup-window 3651d: must be at most 315360000 s (10 years)",
                                       "flag": "--dedup-window", "limit": 315360000, "value": "3651d"}
    for absurd in ("1e30", "inf", "nan"):
        bad = sepp("queues", "declare", "cli-max", "--dedup-window", absurd, server=target)
        assert bad.returncode != 0 and "Traceback" not in bad.stderr, bad.stderr
    assert ok_json("queues", "show", "cli-max", server=target)["settings"]["dedup_window"] == 315_360_000


def test_refusals_print_on_one_line_on_a_narrow_terminal(srv: ServerProcess, tmp_path: Path) -> None:
    """Rich wrapped errors at 80 columns when stderr is not a terminal (a 10,000-char
    job id's refusal came out on 4 lines); now every error is one line at any width."""
    narrow = {"COLUMNS": "40"}
    long_id = sepp("jobs", "show", "x" * 10_000, server=srv.grpc_target, env=narrow)
    assert long_id.returncode == 2, long_id.stderr
    (line,) = long_id.stderr.splitlines()
    assert line.startswith("error: ") and "10000" in line
    unknown = sepp("queues", "show", "no-such-queue-" + "q" * 60, server=srv.grpc_target, env=narrow)
    assert unknown.returncode == 2 and len(unknown.stderr.splitlines()) == 1, unknown.stderr
    bad = tmp_path / "bad.toml"
    bad.write_text("[queues.archive]\ndedup_window = 10000000000000\n", "utf-8")
    start = sepp("serve", "--config", str(bad), "--data-dir", str(tmp_path / "data"), env=narrow)
    assert start.returncode == 2
    assert start.stderr.splitlines() == ["sepp: invalid configuration: queues.archive.dedup_window: Input should "
                                         "be less than or equal to 315360000 (got 10000000000000)"]


def test_queues_show_tells_what_each_flow_limit_holds_back(srv: ServerProcess) -> None:
    target = srv.grpc_target
    ok_json("queues", "declare", "cli-held", "--max-in-flight", "2", "--rate-limit", "1/h", "--rate-burst", "3",
            server=target)
    for _ in range(5):
        enqueue(target, "cli-held")
    shown = ok_json("queues", "show", "cli-held", server=target)
    # 5 READY: 2 slots (3 held), 3 tokens (2 held); together a reserve gets 2 (3 held).
    assert shown["held_back"] == {"max_in_flight": 3, "rate_limit": 2, "per_key": 0, "total": 3,
                                  "per_key_scan_limited": False}
    text = sepp("queues", "show", "cli-held", server=target)
    assert text.returncode == 0, text.stderr
    assert "held back now: max_in_flight 3, rate_limit 2 (all limits 3)" in text.stdout
    enqueue(target, "cli-unheld")
    assert ok_json("queues", "show", "cli-unheld", server=target)["held_back"] is None
    assert "held back" not in sepp("queues", "show", "cli-unheld", server=target).stdout


def test_queues_show_flags_a_queue_without_consumer_like_queues_list(srv: ServerProcess) -> None:
    # The newuser trial: `sepp queues list` and the UI's queue page said "no consumer", `queues show` did not.
    target = srv.grpc_target
    ok_json("queues", "declare", "cli-nocons", "--consumer-timeout", "50ms", server=target)
    enqueue(target, "cli-nocons")
    # Each run of the CLI takes far longer than 50 ms: no Reserve ever came, so the flag is up by the next.
    assert ok_json("queues", "show", "cli-nocons", server=target)["no_consumer"] is True
    text = sepp("queues", "show", "cli-nocons", server=target)
    assert text.returncode == 0, text.stderr
    assert ("no consumer: READY jobs are waiting and no worker has reserved from this queue for 50ms "
            "(its consumer_timeout)") in text.stdout
    assert "cli-nocons (no consumer)" in sepp("queues", "list", server=target).stdout
    ok_json("queues", "declare", "cli-cons", server=target)             # the default 60 s: not flagged
    enqueue(target, "cli-cons")
    assert "no consumer" not in sepp("queues", "show", "cli-cons", server=target).stdout


def test_queues_update_changes_only_the_settings_given(srv: ServerProcess) -> None:
    target = srv.grpc_target
    ok_json("queues", "declare", "cli-upd", "--priority", "6", "--max-in-flight", "4", "--rate-limit", "50/s",
            server=target)
    changed = ok_json("queues", "update", "cli-upd", "--max-in-flight", "0", "--rate-burst", "7",
                      "--concurrency-key", "tenant_id", "--max-in-flight-per-key", "2", "--consumer-timeout", "15m",
                      server=target)
    assert changed["changed"] == ["max_in_flight", "rate_burst", "concurrency_key", "max_in_flight_per_key",
                                  "consumer_timeout"]
    s = changed["settings"]
    assert (s["max_in_flight"], s["rate_burst"], s["concurrency_key"], s["max_in_flight_per_key"],
            s["consumer_timeout"]) == (0, 7, "tenant_id", 2, 900.0)          # 0 is a value: the limit lifted
    assert (s["default_priority"], s["rate_limit"]) == (6, "50/s")              # untouched
    again = ok_json("queues", "update", "cli-upd", "--rate-limit", "", server=target)
    assert again["settings"]["rate_limit"] == "" and again["settings"]["rate_burst"] == 7
    text = sepp("queues", "update", "cli-upd", "--lease", "45s", server=target)
    assert text.returncode == 0 and "updated: lease_duration" in text.stdout, text.stderr
    missing = sepp("queues", "update", "cli-upd-nope", "--max-in-flight", "1", "--json", server=target)
    assert missing.returncode == 2 and json.loads(missing.stderr)["reason"] == "QUEUE_NOT_FOUND"
    assert "cli-upd-nope" not in [q["name"] for q in ok_json("queues", "list", server=target)]   # not created
    nothing = sepp("queues", "update", "cli-upd", server=target)
    assert nothing.returncode == 2 and "nothing to update" in nothing.stderr + nothing.stdout
    bad = sepp("queues", "update", "cli-upd", "--rate-limit", "5/w", "--json", server=target)
    assert bad.returncode == 2 and json.loads(bad.stderr)["flag"] == "--rate-limit"
