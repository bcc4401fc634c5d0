"""A handler's return value is its job's result, end to end on a real server (each backend):
the Worker sends it with the ack (async and blocking handlers; JSON, bytes, ``sepp.Result``,
none), the admin API's ``GetJob``, ``sepp jobs show`` and the UI's job page show it; a
return value JSON cannot encode, or one over the queue's ``max_result_bytes`` (at the limit
and one past it, the limit the Reserve answer carries), fails the attempt and the worker
goes on; and the server refuses an over-limit result from a client that does not check
(``Ack``: INVALID_ARGUMENT / RESULT_TOO_LARGE; ``Settle``: the item's error_reason), failing
the attempt instead of completing the job.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import grpc
import httpx
import pytest
from support.servers import module_server
from support.worker import make_worker, running, until, wire_for
from typer.testing import CliRunner

import sepp.cli.jobs_cmd  # noqa: F401  (registers `sepp jobs` on the app)
from sepp import Result, wire
from sepp.api.v1 import common_pb2 as pb
from sepp.api.v1 import worker_pb2 as wpb
from sepp.cli.main import app
from sepp.testing import ServerProcess
from sepp.worker import Job

pytestmark = pytest.mark.timeout(60)

#: The queues' max_result_bytes on this server.
LIMIT = 4096


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory, backend: str) -> Iterator[ServerProcess]:
    yield from module_server(tmp_path_factory, backend, queue_defaults={
        "lease_duration": 30.0, "retry_base": 60.0, "retry_jitter": 0.0, "limits": {"max_result_bytes": LIMIT}})


async def _run_jobs(srv: ServerProcess, queue: str, handlers: dict[str, Any], jobs: list[tuple[str, int]]
                    ) -> list[str]:
    """Enqueue (job type, max_attempts) ``jobs`` to ``queue``, run a worker with ``handlers``
    until each has a report; the job ids in order."""
    worker, reports = make_worker(srv, queue, concurrency=4)
    for job_type, fn in handlers.items():
        worker.register(job_type, fn)
    with wire_for(srv, queue) as w:
        ids = [w.enqueue(queue, job_type, max_attempts=attempts) for job_type, attempts in jobs]
    async with running(worker):
        await until(lambda: len(reports) >= len(ids), within=20, what="a report for every job")
    assert [r for r in reports if r.refused] == []
    return ids


def _job(srv: ServerProcess, job_id: str) -> pb.Job:
    with wire_for(srv) as w:
        return w.get_job(job_id)


async def test_return_values_are_the_jobs_results_in_the_admin_api_and_jobs_show(
        srv: ServerProcess, fresh_queue: str) -> None:
    async def as_json(job: Job) -> dict[str, Any]:
        return {"sent": True, "to": job.id[:8]}

    def as_bytes(job: Job) -> bytes:  # a blocking handler, run in a thread
        return b"\xff\x00binary"  # not UTF-8

    async def as_result(job: Job) -> Result:
        return Result(b"<b>done</b>", "text/html")

    async def nothing(job: Job) -> None:
        return None

    handlers = {"json": as_json, "bytes": as_bytes, "result": as_result, "none": nothing}
    ids = await _run_jobs(srv, fresh_queue, handlers, [(t, 1) for t in handlers])
    jobs = [_job(srv, job_id) for job_id in ids]
    assert [j.state for j in jobs] == [pb.COMPLETED] * 4
    assert json.loads(jobs[0].result.data) == {"sent": True, "to": ids[0][:8]}
    assert jobs[0].result.encoding == "application/json"
    assert (jobs[1].result.data, jobs[1].result.encoding) == (b"\xff\x00binary", "application/octet-stream")
    assert (jobs[2].result.data, jobs[2].result.encoding) == (b"<b>done</b>", "text/html")
    assert not jobs[3].HasField("result")
    _shown(srv, ids, jobs)


def _shown(srv: ServerProcess, ids: list[str], jobs: list[pb.Job]) -> None:
    """``sepp jobs show`` (JSON and text) and the UI's job page show each job's result: JSON
    (pretty-printed), binary (base64 / hex), none."""
    runner = CliRunner()
    shown = runner.invoke(app, ["jobs", "show", ids[0], "--json", "--server", srv.grpc_target])
    assert shown.exit_code == 0, shown.output
    result = json.loads(shown.stdout)["result"]
    assert json.loads(result["text"]) == {"sent": True, "to": ids[0][:8]}
    assert (result["encoding"], result["bytes"]) == ("application/json", len(jobs[0].result.data))
    binary = json.loads(runner.invoke(app, ["jobs", "show", ids[1], "--json", "--server", srv.grpc_target]).stdout)
    assert binary["result"] == {"base64": "/wBiaW5hcnk=", "encoding": "application/octet-stream", "bytes": 8}
    assert json.loads(runner.invoke(app, ["jobs", "show", ids[3], "--json", "--server", srv.grpc_target]
                                    ).stdout)["result"] is None
    human = runner.invoke(app, ["jobs", "show", ids[0], "--server", srv.grpc_target], env={"COLUMNS": "200"})
    assert human.exit_code == 0, human.output
    assert f"result ({len(jobs[0].result.data)} bytes, encoding application/json)" in human.stdout
    assert '"sent": true' in human.stdout  # pretty-printed, as the payload is

    with httpx.Client(base_url=srv.http_url, timeout=20) as web:
        page = web.get(f"/jobs/{ids[0]}").text
        assert 'id="result-h"' in page and 'class="result result-json"' in page and "&#34;sent&#34;: true" in page
        assert 'class="result result-hex"' in web.get(f"/jobs/{ids[1]}").text
        assert "No result: the handler returned nothing." in web.get(f"/jobs/{ids[3]}").text


async def test_a_value_json_cannot_encode_dead_letters_its_job_at_once_and_the_worker_goes_on(
        srv: ServerProcess, fresh_queue: str) -> None:
    """A new user's report: such a job was retried through all its attempts, each failing the
    same way. Now it is dead-lettered on its first attempt, as a handler's ``DeadLetter`` is."""
    async def unencodable(job: Job) -> object:
        return {"when": object()}

    async def fine(job: Job) -> str:
        return "fine"

    ids = await _run_jobs(srv, fresh_queue, {"odd": unencodable, "ok": fine}, [("odd", 5), ("ok", 1), ("ok", 1)])
    odd, *oks = (_job(srv, job_id) for job_id in ids)
    assert [j.state for j in oks] == [pb.COMPLETED] * 2 and all(j.result.data == b'"fine"' for j in oks)
    why = ("ResultError: the handler's return value cannot be stored as the job's result: TypeError: Object of type "
           "object is not JSON serializable")
    assert odd.state == pb.DEAD_LETTERED and odd.dead_letter_reason.startswith(f"NACK_DEAD_LETTER: {why}")
    assert not odd.HasField("result")
    (attempt,) = odd.attempts  # one attempt of the 5 it had
    assert attempt.error_message.startswith(why) and "JSON-encodable" in attempt.error_message
    assert "Traceback" in attempt.error_detail


async def test_the_worker_checks_the_queues_limit_at_the_limit_and_one_past_it(
        srv: ServerProcess, fresh_queue: str) -> None:
    def sized(job: Job) -> bytes:
        return b"r" * int(job.payload)

    with wire_for(srv, fresh_queue) as w:
        # The limit travels with the jobs: a Reserve answer names each of its queues' limit.
        probe = f"{fresh_queue}-probe"
        w.enqueue(probe, "t")
        resp = w.worker.Reserve(wpb.ReserveRequest(queues=[probe], max_jobs=1, worker_id="t"), timeout=10)
        assert len(resp.reservations) == 1 and dict(resp.max_result_bytes) == {probe: LIMIT}
        w.nack(resp.reservations[0], "release")
        at = w.enqueue(fresh_queue, "sized", max_attempts=1, data=str(LIMIT).encode())
        past = w.enqueue(fresh_queue, "sized", max_attempts=1, data=str(LIMIT + 1).encode())
    worker, reports = make_worker(srv, fresh_queue)
    worker.register("sized", sized)
    async with running(worker):
        await until(lambda: len(reports) >= 2, what="both jobs settled")
    by_id = {r.job.id: r for r in reports}
    assert (by_id[at].outcome, by_id[past].outcome) == ("completed", "retry")  # the past one never left the worker
    assert [r.refused for r in reports] == ["", ""]
    assert _job(srv, at).result.data == b"r" * LIMIT
    done_past = _job(srv, past)
    assert done_past.state == pb.DEAD_LETTERED and not done_past.HasField("result")
    assert done_past.attempts[0].error_message.startswith(f"ResultTooLarge: the handler's result is {LIMIT + 1} bytes")


def _ack_item(res: wpb.Reservation, size: int) -> wpb.SettleItem:
    return wpb.SettleItem(ack=wpb.AckRequest(job_id=res.job.id, lease_id=res.lease_id,
                                             result=pb.Payload(data=b"s" * size, encoding="text/plain")))


def test_the_server_refuses_an_over_limit_result_and_fails_the_attempt(srv: ServerProcess, fresh_queue: str) -> None:
    with wire_for(srv, fresh_queue) as w:
        ids = [w.enqueue(fresh_queue, "t", max_attempts=3) for _ in range(4)]
        res = w.reserve([fresh_queue], 4)
        assert {r.job.id for r in res} == set(ids)
        assert dict(w.worker.Reserve(wpb.ReserveRequest(queues=[fresh_queue], max_jobs=1, worker_id="t"),
                                     timeout=10).max_result_bytes) == {}  # nothing left: no limits said
        at, past, plain = res[:3]
        results = w.settle([_ack_item(at, LIMIT), _ack_item(past, LIMIT + 1),
                            wpb.SettleItem(ack=wpb.AckRequest(job_id=plain.job.id, lease_id=plain.lease_id))])
        assert [(r.ok, r.error_reason) for r in results] == [(True, ""), (False, "RESULT_TOO_LARGE"), (True, "")]
        refused = results[1]
        assert refused.state == pb.SCHEDULED and refused.HasField("run_at")
        assert refused.error_message.startswith(f"the handler's result is {LIMIT + 1} bytes, more than the queue's "
                                                f"max_result_bytes ({LIMIT})")
        assert refused.error_message.endswith(f"to raise it: sepp queues declare {fresh_queue} --max-result-bytes N")
        # A lone Ack: refused with the catalogue's code, the attempt failed all the same.
        lone = res[3]
        with pytest.raises(grpc.RpcError) as info:
            w.worker.Ack(_ack_item(lone, LIMIT + 1).ack, timeout=10)
        assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT  # type: ignore[attr-defined]
        status = wire.status_from_metadata(info.value.trailing_metadata())  # type: ignore[attr-defined]
        assert status is not None
        rejection = wire.unpack_details(status)["rejection"]
        assert (rejection.code, rejection.field, rejection.limit, rejection.actual) == (
            pb.RESULT_TOO_LARGE, "result.data", LIMIT, LIMIT + 1)
        jobs = {j: w.get_job(j) for j in ids}
    assert jobs[at.job.id].state == pb.COMPLETED and jobs[at.job.id].result.data == b"s" * LIMIT
    assert jobs[plain.job.id].state == pb.COMPLETED and not jobs[plain.job.id].HasField("result")
    for job in (jobs[past.job.id], jobs[lone.job.id]):
        assert job.state == pb.SCHEDULED and not job.HasField("result")
        assert job.attempts[0].outcome == "retry" and job.attempts[0].error_message.startswith("ResultTooLarge: ")


def _labelled(res: wpb.Reservation, data: bytes, encoding: str) -> wpb.SettleItem:
    return wpb.SettleItem(ack=wpb.AckRequest(job_id=res.job.id, lease_id=res.lease_id,
                                             result=pb.Payload(data=data, encoding=encoding)))


def test_a_settle_of_result_acks_is_answered_alike_whether_its_labels_were_seen_before(
        srv: ServerProcess, fresh_queue: str) -> None:
    """The servicer checks a result's encoding label once and then takes it as checked: a
    label at the limit (128 bytes) is accepted each time, one past it or with a NUL is
    refused each time (INVALID_ARGUMENT for that item), also when a good label of the same
    call was taken as checked; a batch of result acks that all completed is answered as the
    item-by-item answer would be, and each job keeps its own result."""
    longest, too_long, nul = "e" * 128, "e" * 129, "text/plain\x00"
    with wire_for(srv, fresh_queue) as w:
        ids = [w.enqueue(fresh_queue, "t", max_attempts=3) for _ in range(9)]
        res = sorted(w.reserve([fresh_queue], 9), key=lambda r: ids.index(r.job.id))
        first = w.settle([_labelled(res[0], b"a", longest), _labelled(res[1], b"", "application/json")])
        assert [(r.ok, r.state) for r in first] == [(True, pb.COMPLETED)] * 2
        again = w.settle([_labelled(res[2], b"b" * 100, longest), _labelled(res[3], b"x", too_long),
                          _labelled(res[4], b"y", nul), _labelled(res[5], b"{}", "application/json"),
                          _labelled(res[6], b"z", too_long)])
        bad = (False, "INVALID_ARGUMENT")
        assert [(r.ok, r.error_reason) for r in again] == [(True, ""), bad, bad, (True, ""), bad]
        assert "at most max_encoding_bytes (128)" in again[1].error_message and "NUL" in again[2].error_message
        last = w.settle([_labelled(res[7], b"", ""), _labelled(res[8], b"c", longest)])
        assert [(r.ok, r.state, r.error_reason) for r in last] == [(True, pb.COMPLETED, "")] * 2
        jobs = [w.get_job(j) for j in ids]
    assert [(j.state, j.result.data, j.result.encoding) for j in (jobs[0], jobs[1], jobs[2], jobs[5], jobs[8])] == [
        (pb.COMPLETED, b"a", longest), (pb.COMPLETED, b"", "application/json"), (pb.COMPLETED, b"b" * 100, longest),
        (pb.COMPLETED, b"{}", "application/json"), (pb.COMPLETED, b"c", longest)]
    assert jobs[7].state == pb.COMPLETED
    for j in (jobs[3], jobs[4], jobs[6]):
        assert j.state == pb.RESERVED and not j.HasField("result")  # refused items: nothing applied
