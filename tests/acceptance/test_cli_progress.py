"""``sepp enqueue --batch-file`` shows a progress bar with counts and rate on stderr,
only when asked or on a terminal, and never inside ``--json`` output."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from sepp.testing import ServerProcess


def enqueue_file(server: ServerProcess, path: Path, *flags: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "sepp", "enqueue", "--batch-file", str(path),
                           "--server", server.grpc_target, *flags],
                          capture_output=True, text=True, timeout=120, env={"PATH": "/usr/bin:/bin",
                                                                             "PYTHONPATH": ":".join(sys.path),
                                                                             "COLUMNS": "160"})


def test_a_file_of_jobs_shows_counts_and_rate_when_asked(shared_server: ServerProcess, fresh_queue: str,
                                                         tmp_path: Path) -> None:
    path = tmp_path / "jobs.jsonl"
    path.write_text("".join(json.dumps({"queue": fresh_queue, "job_type": "t", "payload": {"i": i}}) + "\n"
                            for i in range(600)))
    shown = enqueue_file(shared_server, path, "--progress")
    assert shown.returncode == 0, shown.stderr
    assert "600/600" in shown.stderr and "100%" in shown.stderr and "jobs/s" in shown.stderr
    assert len(shown.stdout.splitlines()) == 600  # one ack line per job, on stdout
    quiet = enqueue_file(shared_server, path)  # stderr is not a terminal here: no bar by default
    assert quiet.returncode == 0 and "600/600" not in quiet.stderr
    as_json = enqueue_file(shared_server, path, "--progress", "--json")
    assert [json.loads(line)["status"] for line in as_json.stdout.splitlines()] == ["enqueued"] * 600
    assert "600/600" in as_json.stderr
