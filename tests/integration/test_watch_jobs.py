"""Live job events and progress through a real server, on each backend: ``Client.watch`` and
``AsyncClient.watch`` see a job's life (enqueued, reserved, progress, completed) in order, a
Worker's ``set_progress`` reaches the job (coalesced: the latest value, few writes) and
``sepp jobs show``; ``sepp jobs watch --json`` prints a line per event; bad filters are
refused (docs/decisions.md "Progress and live job events")."""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator

import pytest
from support.interrupting import with_default_sigint
from support.servers import ServerFactory, module_server
from support.waiting import wait_for
from support.worker import make_worker, running, until, wire_for

from sepp import AsyncClient, Client, EnqueueRequest, RejectedError, Unavailable
from sepp.client.watch import JobEvent, JobWatch
from sepp.testing import ServerProcess
from sepp.worker import Job

pytestmark = pytest.mark.timeout(90)


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory, backend: str) -> Iterator[ServerProcess]:
    """One server for the module; every test uses its own queue."""
    yield from module_server(tmp_path_factory, backend)


class Collector:
    """Iterates a watch in a thread, keeping every event."""

    def __init__(self, watch: JobWatch) -> None:
        self.watch = watch
        self.events: list[JobEvent] = []
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            for event in self.watch:
                self.events.append(event)
        except BaseException as exc:  # handed to the test
            self.error = exc

    def of(self, job_id: str) -> list[JobEvent]:
        return [e for e in self.events if e.job_id == job_id]

    def close(self) -> None:
        self.watch.close()
        self.thread.join(10)


def armed(client: Client, col: Collector, queue: str) -> None:
    """Enqueue probe jobs (type ``probe``) into ``queue`` until the watch reports one: from then
    on the server has the watch (events are live: nothing before it is seen)."""
    def probe() -> bool:
        client.enqueue(EnqueueRequest(queue, "probe"))
        return bool(wait_for_quiet(lambda: any(e.job_type == "probe" for e in col.events)))

    wait_for(probe, timeout=20, interval=0.05, what="the watch to see a probe job")


def wait_for_quiet(probe: object) -> bool:
    try:
        return bool(wait_for(probe, timeout=0.5, interval=0.01))  # type: ignore[arg-type]
    except AssertionError:
        return False


async def test_a_watch_sees_a_jobs_life_and_its_progress_coalesced(srv: ServerProcess, fresh_queue: str) -> None:
    client = Client(srv.grpc_target)
    col = Collector(client.watch(queues=[fresh_queue], job_types=["probe", "work"]))
    try:
        armed(client, col, fresh_queue)
        release = asyncio.Event()
        worker, _reports = make_worker(srv, fresh_queue)

        @worker.handler("work")
        async def work(job: Job) -> None:
            for i in range(1, 101):
                job.set_progress({"done": i, "total": 100})
            await release.wait()

        job_id = client.enqueue(EnqueueRequest(fresh_queue, "work")).job_id
        async with running(worker):
            await until(lambda: any(e.kind == "progress" and e.progress == {"done": 100, "total": 100}
                                    for e in col.of(job_id)), within=20,
                        what="the last progress value")
            with wire_for(srv, fresh_queue) as w:
                assert json.loads(w.get_job(job_id).progress) == {"done": 100, "total": 100}
            shown = await asyncio.to_thread(
                subprocess.run, [sys.executable, "-m", "sepp", "jobs", "show", job_id, "--json", "--server",
                                 srv.grpc_target], capture_output=True, text=True, timeout=60,
                env={"PATH": "/usr/bin:/bin", "PYTHONPATH": ":".join(sys.path)})
            assert shown.returncode == 0, shown.stderr
            assert json.loads(shown.stdout)["progress"] == {"done": 100, "total": 100}
            release.set()
            await until(lambda: any(e.kind == "completed" for e in col.of(job_id)), within=20, what="completed")
        sent = worker._keeper.progress_sent
        assert 1 <= sent <= 3, f"{sent} progress writes for 100 values set at once"
        events = col.of(job_id)
        assert [e.kind for e in events if e.kind != "progress"] == ["enqueued", "reserved", "completed"]
        progress = [e.progress for e in events if e.kind == "progress"]
        assert progress[0] == {"done": 1, "total": 100} and progress[-1] == {"done": 100, "total": 100}
        assert len(progress) == sent
        assert [e.position for e in events] == sorted(e.position for e in events)
        reserved = next(e for e in events if e.kind == "reserved")
        assert (reserved.attempt, reserved.state, reserved.queue) == (1, "RESERVED", fresh_queue)
        assert reserved.worker_id == worker.config.worker_id
        assert col.error is None
    finally:
        col.close()
        client.close()


async def test_the_async_watch_filters_by_job_id(srv: ServerProcess, fresh_queue: str) -> None:
    async with AsyncClient(srv.grpc_target) as client:
        mine = (await client.enqueue(EnqueueRequest(fresh_queue, "t"))).job_id
        watch = client.watch(job_ids=[mine])
        seen: list[JobEvent] = []

        async def read() -> None:
            async for event in watch:
                seen.append(event)

        reader = asyncio.create_task(read())
        try:
            with wire_for(srv, fresh_queue) as w:
                # The watch is live from when the server took it: reserve and give back the
                # job until the watch reports it (each a REQUEUED after a RESERVED).
                async def seen_one() -> bool:
                    other = w.enqueue(fresh_queue, "t")  # another job: never reported
                    res = w.reserve_one([fresh_queue])  # the oldest READY job: mine
                    assert res.job.id != other
                    w.nack(res, "release")
                    await asyncio.sleep(0.05)  # a poll interval while the stream delivers
                    return bool(seen)

                for _ in range(200):
                    if await seen_one():
                        break
                assert seen, "the watch never reported the job"
        finally:
            await watch.close()
            await asyncio.wait_for(reader, 10)
        assert {e.job_id for e in seen} == {mine}
        assert {e.kind for e in seen} <= {"reserved", "requeued"}


def test_bad_filters_are_refused_and_a_string_is_no_list(srv: ServerProcess) -> None:
    with Client(srv.grpc_target) as client:
        with pytest.raises(RejectedError, match="not a UUID"):
            next(iter(client.watch(job_ids=["nope"])))
        with pytest.raises(RejectedError, match="at most 100 queues"):
            next(iter(client.watch(queues=[f"q{i}" for i in range(101)])))
        with pytest.raises(TypeError, match="list of names"):
            client.watch(queues="emails")


def test_sepp_jobs_watch_prints_a_json_line_per_event(srv: ServerProcess, fresh_queue: str) -> None:
    child = subprocess.Popen(with_default_sigint([sys.executable, "-m", "sepp", "jobs", "watch", "--queue", fresh_queue,
                                                  "--json", "--server", srv.grpc_target]),
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             env={"PATH": "/usr/bin:/bin", "PYTHONPATH": ":".join(sys.path)})
    lines: list[dict[str, object]] = []

    def read() -> None:
        assert child.stdout is not None
        for line in child.stdout:
            lines.append(json.loads(line))

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        with Client(srv.grpc_target) as client:
            ids = set()

            def printed() -> bool:
                ids.add(client.enqueue(EnqueueRequest(fresh_queue, "t")).job_id)
                return bool(wait_for_quiet(lambda: lines))

            wait_for(printed, timeout=30, interval=0.05, what="sepp jobs watch to print an event")
    finally:
        child.send_signal(signal.SIGINT)
        _, err = child.communicate(timeout=20)
        reader.join(10)
    assert child.returncode == 0, err
    first = lines[0]
    assert first["kind"] == "enqueued" and first["queue"] == fresh_queue and first["job_id"] in ids
    assert first["state"] == "READY" and isinstance(first["position"], int)


def test_a_stopping_server_ends_the_watch_at_once_with_unavailable(server_factory: ServerFactory) -> None:
    srv = server_factory(shutdown_grace=30.0)
    with Client(srv.grpc_target) as client:
        col = Collector(client.watch())
        armed(client, col, "stopping")
        started = time.monotonic()
        srv.terminate(timeout=20)
        col.thread.join(20)
        assert not col.thread.is_alive()
        assert isinstance(col.error, Unavailable), col.error
        assert time.monotonic() - started < 15  # not held up to the 30 s grace

