"""The Workers page against a real server on each backend: a
Worker runtime reports its concurrency and version on Reserve, the admin API, the UI and
``sepp workers list`` show it with its jobs in flight and jobs done, an old client (raw stubs
without the new fields) still works and shows up, a worker with no call for two lease
periods is counted as gone quiet, and one that stopped cleanly is listed stopped at once."""

from __future__ import annotations

import asyncio
import json
import socket
import subprocess
import sys
import time
from collections.abc import Iterator

import httpx
import pytest
from google.protobuf import duration_pb2
from support.admin import AdminStubs, connect
from support.failures import fails
from support.servers import module_server
from support.waiting import wait_for
from support.worker import fast_queue

from sepp import Job, Worker
from sepp.api.v1 import admin_pb2 as apb
from sepp.api.v1 import common_pb2 as pb
from sepp.api.v1 import worker_pb2 as wpb
from sepp.client._core import USER_AGENT
from sepp.testing import ServerProcess

#: Every queue's lease: 1 s, so "quiet" (two lease periods without a call) comes after 2 s.
LEASE = 1.0


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory, backend: str) -> Iterator[ServerProcess]:
    yield from module_server(tmp_path_factory, backend, queue_defaults=fast_queue(lease_duration=LEASE))


@pytest.fixture
def stubs(srv: ServerProcess) -> Iterator[AdminStubs]:
    with connect(srv.grpc_target) as s:
        yield s


def workers(stubs: AdminStubs) -> dict[str, apb.WorkerInfo]:
    return {w.worker_id: w for w in stubs.call("ListWorkers", apb.ListWorkersRequest()).workers}


async def test_a_running_worker_is_listed_with_what_it_said_and_what_it_did(srv: ServerProcess, stubs: AdminStubs,
                                                                            fresh_queue: str) -> None:
    release = asyncio.Event()
    started: list[str] = []
    worker = Worker(srv.grpc_target, [fresh_queue], concurrency=7, prefetch=0, poll_wait=0.2,
                    worker_id=f"page-{fresh_queue}")

    @worker.handler("t")
    async def hold(job: Job) -> None:
        started.append(job.id)
        if job.custom.get("hold"):
            await release.wait()

    for _ in range(5):
        stubs.enqueue(fresh_queue)
    for _ in range(3):
        stubs.enqueue(fresh_queue, custom={"hold": pb_true()})
    run = asyncio.create_task(worker.run(install_signal_handlers=False))
    try:
        me = f"page-{fresh_queue}"
        info = await asyncio.to_thread(wait_for, lambda: (w := workers(stubs).get(me)) is not None
                                       and w.in_flight == 3 and w.completed_last_minute == 5 and w, 15.0)
        assert (info.concurrency, info.client_version, info.host) == (7, USER_AGENT, socket.gethostname())
        assert list(info.queues) == [fresh_queue] and not info.quiet and info.failed_last_minute == 0
        assert info.last_reserve.seconds > 0 and info.first_seen.seconds <= info.last_seen.seconds
        assert len(info.nodes) == 1
        async with httpx.AsyncClient(timeout=20) as web:
            page = (await web.get(f"{srv.http_url}/workers")).text
        assert me in page and USER_AGENT in page and ">7<" in page
    finally:
        release.set()
        await worker.stop(5.0)
        await run


def pb_true() -> pb.CustomValue:
    return pb.CustomValue(bool_value=True)


def test_an_old_client_still_reserves_and_a_silent_worker_goes_quiet(srv: ServerProcess, stubs: AdminStubs,
                                                                     fresh_queue: str) -> None:
    job_id = stubs.enqueue(fresh_queue)
    old = f"old-{fresh_queue}"
    sent = time.monotonic()
    (res,) = stubs.reserve(fresh_queue, worker_id=old)  # raw stubs: none of the new fields
    assert res.job.id == job_id
    info = workers(stubs)[old]
    assert (info.concurrency, info.client_version, info.host, info.in_flight) == (0, "", "", 1)
    if time.monotonic() - sent < 2 * LEASE:  # (a loaded machine may have answered later than that)
        assert not info.quiet
    quiet = wait_for(lambda: (w := workers(stubs)[old]).quiet and w, 10.0)  # 2 × the 1 s lease without a call
    assert quiet.worker_id == old
    assert stubs.call("ListWorkers", apb.ListWorkersRequest()).quiet >= 1
    again = stubs.reserve(fresh_queue, worker_id=old)  # its lease expired; it calls again and gets the job back
    assert [r.job.id for r in again] == [job_id]
    stubs.worker.Ack(wpb.AckRequest(job_id=job_id, lease_id=again[0].lease_id, worker_id=old), timeout=10)
    back = workers(stubs)[old]
    assert (back.quiet, back.completed_last_minute, back.in_flight) == (False, 1, 0)


async def test_a_stopped_worker_is_listed_stopped_at_once_and_live_again_when_it_reserves(
        srv: ServerProcess, stubs: AdminStubs, fresh_queue: str) -> None:
    """A new user's report: a worker stopped cleanly (SIGTERM / ``Worker.stop``) was listed "live"
    for two lease periods. Its last call now says it stopped: ListWorkers, ``sepp workers list``
    and the page show it stopped right after the stop; its restart (the same id reserving) is
    live again."""
    me = f"stop-{fresh_queue}"
    worker = Worker(srv.grpc_target, [fresh_queue], concurrency=2, poll_wait=30.0, worker_id=me)

    @worker.handler("t")
    async def t(job: Job) -> None:
        pass

    run = asyncio.create_task(worker.run(install_signal_handlers=False))
    try:
        await asyncio.to_thread(wait_for, lambda: me in workers(stubs), 15.0)  # parked in its 30 s long poll
    finally:
        await worker.stop(5.0)
        await run
    gone = await asyncio.to_thread(wait_for, lambda: (w := workers(stubs)[me]).HasField("stopped_at") and w, 10.0)
    assert not gone.quiet and gone.stopped_at.ToMicroseconds() >= gone.last_reserve.ToMicroseconds()
    assert stubs.call("ListWorkers", apb.ListWorkersRequest()).stopped >= 1
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": ":".join(sys.path), "COLUMNS": "250"}
    listed = await asyncio.to_thread(subprocess.run, [sys.executable, "-m", "sepp", "workers", "list", "--server",
                                                      srv.grpc_target, "--json"],
                                     capture_output=True, text=True, timeout=60, env=env)
    assert listed.returncode == 0, listed.stderr
    (mine,) = [w for w in json.loads(listed.stdout)["workers"] if w["worker_id"] == me]
    assert mine["state"] == "stopped" and mine["stopped_at"].endswith("Z") and not mine["quiet"]
    table = await asyncio.to_thread(subprocess.run, [sys.executable, "-m", "sepp", "workers", "list", "--server",
                                                     srv.grpc_target], capture_output=True, text=True, timeout=60,
                                    env=env)
    (line,) = [ln for ln in table.stdout.splitlines() if me in ln]
    assert "stopped" in line and "ago" in line and " stopped" in table.stdout.splitlines()[-1]
    async with httpx.AsyncClient(timeout=20) as web:
        page = (await web.get(f"{srv.http_url}/workers")).text
    row = page[page.index(f'data-worker="{me}"'):]
    assert "stopped" in row[:row.index("</tr>")] and 'id="stopped-count"' in page
    stubs.worker.Reserve(wpb.ReserveRequest(queues=[fresh_queue], max_jobs=1, worker_id=me), timeout=10)
    back = workers(stubs)[me]  # restarted with the same id: live at its first Reserve
    assert not back.HasField("stopped_at") and not back.quiet


def test_sepp_workers_list(srv: ServerProcess, stubs: AdminStubs, fresh_queue: str) -> None:
    me = f"cli-{fresh_queue}"
    stubs.enqueue(fresh_queue)
    held = stubs.worker.Reserve(wpb.ReserveRequest(queues=[fresh_queue], max_jobs=1, worker_id=me,
                                                   lease_duration=duration_pb2.Duration(seconds=60)), timeout=10)
    assert len(held.reservations) == 1
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": ":".join(sys.path), "COLUMNS": "250"}
    done = subprocess.run([sys.executable, "-m", "sepp", "workers", "list", "--server", srv.grpc_target, "--json"],
                          capture_output=True, text=True, timeout=60, env=env)
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    (mine,) = [w for w in doc["workers"] if w["worker_id"] == me]
    assert mine["in_flight"] == 1 and mine["queues"] == [fresh_queue] and mine["last_reserve"].endswith("Z")
    assert isinstance(doc["quiet"], int)
    table = subprocess.run([sys.executable, "-m", "sepp", "workers", "list", "--server", srv.grpc_target],
                           capture_output=True, text=True, timeout=60, env=env)
    assert table.returncode == 0 and me in table.stdout and "gone quiet" in table.stdout


def test_a_refused_reserve_registers_no_worker_and_the_listing_is_bounded(srv: ServerProcess, stubs: AdminStubs,
                                                                          fresh_queue: str) -> None:
    """Worker ids are caller input (found by attacking it): a Reserve the server refuses
    leaves no trace on the Workers page, and however many workers call, ListWorkers answers at
    most 500 (``total`` counts all) and the page shows at most 200 rows."""
    fails(lambda: stubs.worker.Reserve(wpb.ReserveRequest(queues=[fresh_queue], max_jobs=0,
                                                          worker_id=f"refused-{fresh_queue}"), timeout=10))
    assert f"refused-{fresh_queue}" not in workers(stubs)
    for i in range(520):
        stubs.worker.Reserve(wpb.ReserveRequest(queues=[fresh_queue], max_jobs=1, worker_id=f"many-{fresh_queue}-{i}",
                                                host="h" * 500), timeout=10)
    resp = stubs.call("ListWorkers", apb.ListWorkersRequest())
    assert len(resp.workers) == 500 and resp.total >= 520
    assert all(len(w.host) == 200 for w in resp.workers if w.worker_id.startswith("many-"))
    page = httpx.get(f"{srv.http_url}/workers", timeout=20).text
    assert page.count('<tr class="worker') == 200 and 'id="workers-more"' in page


def test_a_release_counts_as_neither_done_nor_failed(srv: ServerProcess, stubs: AdminStubs, fresh_queue: str) -> None:
    """A stopping worker gives its jobs back (releases): nothing failed, so the page's
    ``failed/min`` stays 0 for them; a retry counts (a new user's trial, 2026-12-03: a stop
    that released 12 jobs showed ``failed/min 12``). Settle and the lone Nack alike."""
    me = f"releases-{fresh_queue}"
    for _ in range(4):
        stubs.enqueue(fresh_queue)
    a, b, c, d = stubs.reserve(fresh_queue, 4, worker_id=me)
    stubs.worker.Settle(wpb.SettleRequest(worker_id=me, items=[
        wpb.SettleItem(ack=wpb.AckRequest(job_id=a.job.id, lease_id=a.lease_id)),
        wpb.SettleItem(nack=wpb.NackRequest(job_id=b.job.id, lease_id=b.lease_id, release=wpb.ReleaseDirective())),
        wpb.SettleItem(nack=wpb.NackRequest(job_id=c.job.id, lease_id=c.lease_id, retry=wpb.RetryDirective())),
    ]), timeout=10)
    stubs.worker.Nack(wpb.NackRequest(job_id=d.job.id, lease_id=d.lease_id, release=wpb.ReleaseDirective(),
                                      worker_id=me), timeout=10)
    info = wait_for(lambda: (w := workers(stubs).get(me)) is not None and w.completed_last_minute == 1 and w, 10.0)
    assert info.failed_last_minute == 1, "a release was counted as a failure"
