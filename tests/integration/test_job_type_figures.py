"""Job-type figures through a real server on each backend: the admin API's
``GetJobTypeStats`` after acks, retries and dead letters over the wire, and ``sepp queues
show`` (table and ``--json``) printing them. One server per module and backend; each test
uses queues of its own."""

from __future__ import annotations

import json
from collections.abc import Iterator

import grpc
import pytest
from support.admin import AdminStubs, connect
from support.failures import fails
from support.servers import module_server
from support.worker import Wire
from typer.testing import CliRunner

import sepp.cli.jobs_cmd
import sepp.cli.queues_cmd  # noqa: F401  (this and jobs_cmd register their commands on app)
from sepp.api.v1 import admin_pb2 as apb
from sepp.cli.main import app
from sepp.testing import ServerProcess
from sepp.wire import duration_to_seconds


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory, backend: str) -> Iterator[ServerProcess]:
    yield from module_server(tmp_path_factory, backend)


@pytest.fixture
def stubs(srv: ServerProcess) -> Iterator[AdminStubs]:
    with connect(srv.grpc_target) as s:
        yield s


def _work(srv: ServerProcess, queue: str) -> None:
    """In ``queue``: three ``mail`` jobs acked, one ``mail`` retried then acked, one ``pdf``
    dead-lettered, one ``pdf`` still waiting."""
    wire = Wire(srv.grpc_target, queue=queue)
    try:
        for _ in range(4):
            wire.enqueue(job_type="mail")
        for _ in range(3):
            wire.ack(wire.reserve_one())
        wire.nack(wire.reserve_one(), "retry_after", delay=0.0)
        wire.ack(wire.reserve_one())
        wire.enqueue(job_type="pdf")
        wire.nack(wire.reserve_one(), "dead_letter", reason="NOPE")
        wire.enqueue(job_type="pdf")
    finally:
        wire.close()


def test_the_admin_api_reports_each_job_types_counts_and_run_times(srv: ServerProcess, stubs: AdminStubs,
                                                                   fresh_queue: str) -> None:
    _work(srv, fresh_queue)
    resp = stubs.call("GetJobTypeStats", apb.GetJobTypeStatsRequest(queue=fresh_queue))
    assert resp.queue == fresh_queue and resp.relative_accuracy == pytest.approx(0.05)
    by_type = {t.job_type: t for t in resp.job_types}
    assert [t.job_type for t in resp.job_types] == ["mail", "pdf"]          # busiest first
    mail, pdf = by_type["mail"].last_hour, by_type["pdf"].last_hour
    assert (mail.completed, mail.retried, mail.dead_lettered, mail.runs) == (4, 1, 0, 5)
    assert (pdf.completed, pdf.retried, pdf.dead_lettered, pdf.runs) == (0, 0, 1, 1)
    assert by_type["mail"].last_day == mail                                  # nothing older than an hour
    p50, p95, top = (duration_to_seconds(getattr(mail, f"run_time_{n}")) for n in ("p50", "p95", "max"))
    assert 0 < p50 <= p95 <= top * 1.05 and top < 30
    assert pdf.HasField("run_time_max")


def test_an_unknown_queue_is_not_found_and_a_quiet_one_has_no_job_types(stubs: AdminStubs,
                                                                         fresh_queue: str) -> None:
    failure = fails(stubs.call, "GetJobTypeStats", apb.GetJobTypeStatsRequest(queue=fresh_queue))
    assert (failure.code, failure.reason) == (grpc.StatusCode.NOT_FOUND, "QUEUE_NOT_FOUND")
    stubs.call("DeclareQueue", apb.DeclareQueueRequest(name=fresh_queue))
    assert list(stubs.call("GetJobTypeStats", apb.GetJobTypeStatsRequest(queue=fresh_queue)).job_types) == []


@pytest.mark.sqlite_only(reason="CLI formatting: backend-neutral (the API test covers both backends)")
def test_sepp_queues_show_prints_the_job_type_figures(srv: ServerProcess, fresh_queue: str) -> None:
    _work(srv, fresh_queue)
    runner = CliRunner()
    result = runner.invoke(app, ["queues", "show", fresh_queue, "--server", srv.grpc_target])
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert "job types" in out and "p50" in out and "p95" in out and "dead-lettered" in out
    lines = [line.split() for line in out.splitlines()]
    mail = next(cells for cells in lines if cells[:1] == ["mail"])
    assert mail[1:5] == ["1h", "4", "1", "0"]                                 # completed, retried, dead
    day = lines[lines.index(mail) + 1]
    assert day[:4] == ["24h", "4", "1", "0"]
    assert any(cells[:1] == ["pdf"] and cells[1:5] == ["1h", "0", "0", "1"] for cells in lines)

    result = runner.invoke(app, ["queues", "show", fresh_queue, "--json", "--server", srv.grpc_target])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    types = {t["job_type"]: t for t in doc["job_types"]}
    assert types["mail"]["last_hour"]["completed"] == 4 and types["pdf"]["last_day"]["dead_lettered"] == 1
    hour = types["mail"]["last_hour"]
    assert 0 < hour["run_time_p50"] <= hour["run_time_p95"] and hour["runs"] == 5

    empty = runner.invoke(app, ["queues", "show", "never-" + fresh_queue, "--server", srv.grpc_target])
    assert empty.exit_code == 2                                                # unknown queue: refused
