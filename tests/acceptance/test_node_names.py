"""A ``sepp serve`` process names its node (``--node-name NAME`` names the
node in ``GetServerInfo``, logs, attempt history and the UI): every log line carries ``[NAME]``,
the start line included, and ``sepp jobs show`` (through the admin API) names the node of
each attempt."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from google.protobuf.duration_pb2 import Duration

from sepp.api.v1 import common_pb2 as pb
from sepp.api.v1 import producer_pb2_grpc, worker_pb2_grpc
from sepp.api.v1 import worker_pb2 as wpb
from sepp.testing import ServerProcess

NODE = "node-x"


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """One named SQLite server for the module (the node name is backend-neutral: the
    storage conformance suite checks both drivers store it)."""
    with ServerProcess(Path(tmp_path_factory.mktemp("nodes")), {"node_name": NODE}) as proc:
        yield proc


def _sepp(*args: str, server: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SEPP_")}
    env["COLUMNS"] = "200"
    return subprocess.run([sys.executable, "-m", "sepp", *args, "--server", server], capture_output=True,
                          text=True, env=env, timeout=60, input="")


def test_the_start_line_and_every_log_line_name_the_node(srv: ServerProcess) -> None:
    logs = [line for line in srv.output if " sepp." in line and not line.startswith("sepp ready")]
    start = [line for line in logs if ": serving: " in line]
    assert len(start) == 1, srv.output
    assert re.search(rf" INFO sepp\.server \[{NODE}\]: serving: sepp \S+, node {NODE}, storage sqlite ", start[0])
    assert all(f" [{NODE}]: " in line for line in logs), logs
    ready = [line for line in srv.output if line.startswith("sepp ready")]
    assert len(ready) == 1 and re.fullmatch(r"sepp ready grpc=\S+ http=\S+ data=\S+ persist=\S+ writer=\S+ "
                                            r"strict=\S+ tls=off", ready[0]), ready  # + tls


def test_jobs_show_names_the_node_of_each_attempt(srv: ServerProcess) -> None:
    target = srv.grpc_target
    with grpc.insecure_channel(target) as ch:
        job_id = producer_pb2_grpc.ProducerServiceStub(ch).Enqueue(
            pb.EnqueueRequest(queue="nodes-q", job_type="t")).job_id
        worker = worker_pb2_grpc.WorkerServiceStub(ch)
        (r,) = worker.Reserve(wpb.ReserveRequest(queues=["nodes-q"], max_jobs=1, worker_id="w-1")).reservations
        worker.Nack(wpb.NackRequest(job_id=job_id, lease_id=r.lease_id, retry_after=Duration(seconds=0),
                                    error=wpb.JobError(message="first")))
        (r,) = worker.Reserve(wpb.ReserveRequest(queues=["nodes-q"], max_jobs=1, worker_id="w-2",
                                                 wait=Duration(seconds=5))).reservations
        worker.Ack(wpb.AckRequest(job_id=job_id, lease_id=r.lease_id))
    done = _sepp("jobs", "show", job_id, "--json", server=target)
    assert done.returncode == 0, done.stderr + done.stdout
    data = json.loads(done.stdout)
    assert [(a["attempt"], a["worker_id"], a["node"], a["outcome"]) for a in data["attempts"]] == [
        (1, "w-1", NODE, "retry_after"), (2, "w-2", NODE, "completed")]
    assert data["node"] == NODE
    human = _sepp("jobs", "show", job_id, server=target)
    assert human.returncode == 0 and re.search(rf"\b2\s+w-2\s+{NODE}\b", human.stdout), human.stdout
