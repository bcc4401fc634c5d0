"""``sepp enqueue`` and ``sepp info`` against a real server (in-process CLI, real gRPC)."""

from __future__ import annotations

import base64
import datetime as dt
import json
import uuid
from pathlib import Path

from typer.testing import CliRunner

import sepp
import sepp.cli.producer  # registers the commands on app
from sepp.cli.main import app
from sepp.testing import ServerProcess

runner = CliRunner()


def _run(server: ServerProcess, *args: str, stdin: str | bytes | None = None) -> tuple[int, str, str]:
    result = runner.invoke(app, [*args, "--server", server.grpc_target], input=stdin)
    return result.exit_code, result.stdout, result.stderr


def test_enqueue_prints_the_job_id(shared_server: ServerProcess) -> None:
    code, out, _ = _run(shared_server, "enqueue", "emails", "welcome", '{"user_id": 42}', "--json-payload",
                        "-c", "user_id=42", "-c", "vip:bool=yes", "-p", "7", "--in", "10m")
    assert code == 0 and out.startswith("enqueued job ")


def test_enqueue_json_output_and_deduplication(shared_server: ServerProcess) -> None:
    key = uuid.uuid4().hex
    code, out, _ = _run(shared_server, "enqueue", "emails", "welcome", "-k", key, "--json")
    first = json.loads(out)
    assert code == 0 and first["deduplicated"] is False
    code, out, _ = _run(shared_server, "enqueue", "emails", "welcome", "-k", key, "--json")
    assert json.loads(out) == {"job_id": first["job_id"], "deduplicated": True}


def test_payload_from_stdin_and_from_a_file(shared_server: ServerProcess, tmp_path: Path) -> None:
    assert _run(shared_server, "enqueue", "q", "t", "-", "-e", "text/plain", stdin="raw bytes")[0] == 0
    blob = tmp_path / "blob.bin"
    blob.write_bytes(b"\x00\x01\x02")
    assert _run(shared_server, "enqueue", "q", "t", "--payload-file", str(blob))[0] == 0


def test_a_rejection_prints_code_and_details_to_stderr_and_exits_2(shared_server: ServerProcess) -> None:
    code, out, err = _run(shared_server, "enqueue", "q", "t", "-c", "x:float=nan")
    assert code == 2 and out == ""
    assert "InvalidArgument" in err and "field: custom[x]" in err
    code, _, err = _run(shared_server, "enqueue", "q", "t", "--priority", "12", "--json", "--no-local-validation")
    assert code == 2
    assert json.loads(err) == {"error": "rejected", "code": "InvalidArgument", "field": "priority",
                               "message": "priority must be between 0 and 9", "limit": 9, "actual": 12}


def test_a_batch_file_is_sent_in_chunks_with_per_line_results(server: ServerProcess, tmp_path: Path) -> None:
    server.restart(limits={"max_enqueue_batch": 2})
    soon = (dt.datetime.now(dt.UTC) + dt.timedelta(hours=1)).isoformat()
    raw = {"data_b64": base64.b64encode(b"\xff").decode(), "encoding": "application/octet-stream"}
    lines = [
        {"job_type": "a", "payload": {"x": 1}},
        {"queue": "other", "job_type": "b", "payload": raw},
        {},  # only the defaults
        {"job_type": "d", "priority": 99},
        {"job_type": "e", "custom": {"n": 1, "f": 1.5, "ok": True}, "scheduled_at": soon},
    ]
    path = tmp_path / "jobs.jsonl"
    path.write_text("\n".join(json.dumps(line) for line in lines) + "\n\n")
    code, out, err = _run(server, "enqueue", "emails", "default", "--batch-file", str(path), "--json")
    results = [json.loads(line) for line in out.splitlines()]
    assert code == 2, err  # one line was rejected
    assert [(r["line"], r["status"]) for r in results] == [
        (1, "enqueued"), (2, "enqueued"), (3, "enqueued"), (4, "rejected"), (5, "enqueued")]
    assert results[3]["code"] == "InvalidArgument" and results[3]["field"] == "priority"


def test_an_atomic_batch_file_is_all_or_nothing(shared_server: ServerProcess, tmp_path: Path) -> None:
    path = tmp_path / "jobs.jsonl"
    path.write_text('{"job_type": "a"}\n{"job_type": "b", "max_attempts": 0}\n')
    code, out, err = _run(shared_server, "enqueue", "checkout", "--batch-file", str(path), "--atomic")
    assert code == 2 and out == ""
    assert "line 2 rejected" in err and "nothing enqueued" in err
    path.write_text('{"job_type": "a"}\n{"job_type": "b"}\n')
    code, out, _ = _run(shared_server, "enqueue", "checkout", "--batch-file", str(path), "--atomic")
    assert code == 0 and out.count("enqueued") == 2


def test_info_shows_version_modes_limits_and_queues(server: ServerProcess) -> None:
    server.restart(queues={"emails": {"limits": {"allowed_encodings": ["application/json"]}}})
    code, out, _ = _run(server, "info")
    assert code == 0
    assert f"sepp {sepp.__version__}" in out and "persist mode: group" in out and "emails" in out
    code, out, _ = _run(server, "info", "--json")
    info = json.loads(out)
    assert info["version"] == sepp.__version__ and info["strict"] is False
    assert info["limits"]["max_enqueue_batch"] == 256
    assert info["queues"][0]["name"] == "emails"
    assert info["queues"][0]["settings"]["limits"]["allowed_encodings"] == ["application/json"]
