"""``sepp workflows list|show|cancel`` in subprocesses against a real server (docs/workflows.md
"Seeing and steering a workflow", docs/operations.md)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support.admin import connect
from support.servers import backend_config

from sepp import Client, EnqueueRequest, chain
from sepp.api.v1 import worker_pb2 as wpb
from sepp.testing import ServerProcess


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory, backend: str) -> Iterator[ServerProcess]:
    """One server for the module; every test uses its own queues."""
    with ServerProcess(Path(tmp_path_factory.mktemp("cli-wf")), backend_config(backend)) as proc:
        yield proc


def sepp(*args: str, server: str) -> subprocess.CompletedProcess[str]:
    """Run ``sepp`` with ``args`` and ``--server``, no terminal and no SEPP_ settings."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SEPP_")} | {"COLUMNS": "200"}
    return subprocess.run([sys.executable, "-m", "sepp", *args, "--server", server], capture_output=True,
                          text=True, env=env, timeout=60, input="")


def ok_json(*args: str, server: str) -> Any:
    """Run with ``--json``, expect exit 0, parse stdout."""
    result = sepp(*args, "--json", server=server)
    assert result.returncode == 0, result.stderr + result.stdout
    return json.loads(result.stdout)


def _chain(srv: ServerProcess, steps: int = 3) -> tuple[str, list[str], str]:
    q = f"cliwf-{uuid.uuid4().hex[:8]}"
    with Client(srv.grpc_target) as client:
        ack = client.enqueue_workflow(chain(*[EnqueueRequest(q, f"step{i}") for i in range(steps)]))
    return ack.workflow_id, [a.job_id for a in ack.acks], q


def test_list_and_show_a_workflow_with_a_failed_node(srv: ServerProcess) -> None:
    target = srv.grpc_target
    older, _, _ = _chain(srv, 2)
    wf, ids, q = _chain(srv)
    with connect(target) as stubs:
        (r,) = stubs.reserve(q)
        stubs.worker.Nack(wpb.NackRequest(job_id=ids[0], lease_id=r.lease_id, dead_letter="boom",
                                          error=wpb.JobError(message="no luck")), timeout=10)
    listed = ok_json("workflows", "list", server=target)["workflows"]
    order = [w["workflow_id"] for w in listed]
    assert order.index(wf) < order.index(older)  # newest first
    mine = next(w for w in listed if w["workflow_id"] == wf)
    assert mine["nodes"] == 3 and mine["terminal"] is True
    assert (mine["counts"]["dead_lettered"], mine["counts"]["cancelled"]) == (1, 2)
    one = ok_json("workflows", "list", "--limit", "1", server=target)
    assert [w["workflow_id"] for w in one["workflows"]] == [order[0]] and one["next_page_token"]
    shown = ok_json("workflows", "show", wf, server=target)
    assert shown["failed"] == [0, 1, 2]
    assert [n["after"] for n in shown["nodes"]] == [[], [0], [1]]
    assert shown["nodes"][0]["last_error"] == "no luck"
    table = sepp("workflows", "show", wf, server=target)
    assert table.returncode == 0, table.stderr
    assert "failed nodes" in table.stdout and "no luck" in table.stdout and "DEPENDENCY_FAILED" in table.stdout
    listing = sepp("workflows", "list", server=target)
    assert listing.returncode == 0 and wf in listing.stdout and "DEAD_LETTERED 1" in listing.stdout


def test_cancel_a_workflow_and_the_refusals(srv: ServerProcess) -> None:
    target = srv.grpc_target
    wf, _ids, _ = _chain(srv)
    unasked = sepp("workflows", "cancel", wf, server=target)  # no terminal to ask: refused, nothing done
    assert unasked.returncode == 2 and "--yes" in unasked.stderr
    done = ok_json("workflows", "cancel", wf, "--yes", "--reason", "not needed", server=target)
    assert (done["cancelled"], done["cancel_requested"], done["terminal"]) == (3, 0, True)
    shown = ok_json("workflows", "show", wf, server=target)
    assert [n["reason"] for n in shown["nodes"]] == ["not needed"] * 3
    plain = sepp("workflows", "cancel", wf, "--yes", server=target)
    assert plain.returncode == 0 and "0 node(s) cancelled" in plain.stdout
    missing = sepp("workflows", "show", "01900000-0000-7000-8000-000000000000", server=target)
    assert missing.returncode == 2 and "does not exist" in missing.stderr
    bad = sepp("workflows", "cancel", "nope", "--yes", server=target)
    assert bad.returncode == 2
