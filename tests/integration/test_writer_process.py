"""The SQLite writer in its own process (docs/decisions.md "The writer in its own process").

* ``sepp serve`` runs exactly one writer child; a SIGKILLed server leaves no writer behind
  and loses no acknowledged write;
* a writer that dies makes the server stop with exit code 1 and a clear line, and a
  restart on the same folder serves everything that was acknowledged;
* ``[sqlite] writer = "thread"`` keeps the writer in the server process and works the same.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable
from pathlib import Path

import grpc
import pytest
from support.servers import ServerFactory
from support.waiting import wait_for
from support.worker import Wire, wire_for

from sepp.api.v1 import common_pb2 as pb
from sepp.server.app import SIGNAL_ECHO
from sepp.testing import ServerProcess

pytestmark = pytest.mark.sqlite_only(reason="the SQLite writer process, its knobs and [sqlite] writer")

WRITER_MODULE = "sepp.storage.sqlite.writer"


def children(pid: int) -> list[int]:
    """Direct children of ``pid`` (Linux /proc)."""
    try:
        text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    except OSError:
        return []
    return [int(p) for p in text.split()]


def cmdline(pid: int) -> str:
    """The command line of ``pid`` ("" once it is gone)."""
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def alive(pid: int) -> bool:
    """True while ``pid`` exists and is not a zombie."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def writer_of(server: ServerProcess) -> int:
    """The pid of the server's one writer child."""
    writers = [c for c in children(server.pid) if WRITER_MODULE in cmdline(c)]
    assert len(writers) == 1, f"expected one writer child, found {writers}"
    return writers[0]


def test_sigkilled_server_leaves_no_writer_and_loses_no_acknowledged_job(server_factory: ServerFactory) -> None:
    server = server_factory()
    writer = writer_of(server)
    with wire_for(server) as w:
        ids = [w.enqueue("kept") for _ in range(20)]
    server.kill()
    wait_for(lambda: not alive(writer), timeout=10, what="the writer exits after its server is SIGKILLed")
    server.start()
    assert writer_of(server) != writer
    with wire_for(server) as w:
        got = w.reserve(["kept"], max_jobs=100)
    assert sorted(r.job.id for r in got) == sorted(ids)


def test_writer_death_stops_the_server_and_a_restart_serves_what_was_acknowledged(
        server_factory: ServerFactory) -> None:
    server = server_factory()
    with wire_for(server) as w:
        kept = w.enqueue("kept")
    os.kill(writer_of(server), signal.SIGKILL)
    assert server.proc is not None
    code = server.proc.wait(30)
    assert code == 1
    wait_for(lambda: any("sepp: stopped: the writer process exited" in line for line in server.output), timeout=15,
             what="the stop reason in the server's output")
    server.start()
    with wire_for(server) as w:
        assert [r.job.id for r in w.reserve(["kept"], max_jobs=10)] == [kept]


def test_sigterm_stops_the_writer_too(server_factory: ServerFactory) -> None:
    server = server_factory()
    writer = writer_of(server)
    assert server.terminate() == 0
    deadline = time.monotonic() + 10
    while alive(writer) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert not alive(writer)


@pytest.mark.parametrize("mode", ["sync", "group"])
def test_thread_writer_serves_the_same(server_factory: ServerFactory, mode: str) -> None:
    server = server_factory(sqlite={"writer": "thread"}, persist_mode=mode)
    assert [c for c in children(server.pid) if WRITER_MODULE in cmdline(c)] == []
    with wire_for(server) as w:
        ids = [w.enqueue("t") for _ in range(3)]
        got = w.reserve(["t"], max_jobs=10)
        assert [r.job.id for r in got] == ids
        for r in got:
            w.ack(r)
        assert w.get_job(ids[0]).state == 4  # COMPLETED


def test_a_second_signal_stops_at_once_even_with_a_hung_writer(server_factory: ServerFactory) -> None:
    server = server_factory(shutdown_grace=1.0)
    with wire_for(server) as w:
        kept = w.enqueue("kept")
    writer = writer_of(server)
    os.kill(writer, signal.SIGSTOP)  # a writer stuck on a dead disk
    assert server.proc is not None
    server.proc.send_signal(signal.SIGTERM)
    wait_for(lambda: any("a second signal stops at once" in line for line in server.output), timeout=10,
             what="the graceful stop to begin")
    time.sleep(SIGNAL_ECHO + 0.1)  # a second signal sooner is taken as the same stop (an echo)
    assert server.proc.poll() is None, "a hung writer holds the graceful stop up"
    server.proc.send_signal(signal.SIGTERM)
    assert server.proc.wait(10) == 1
    wait_for(lambda: not alive(writer), timeout=10, what="the hung writer to be killed")
    server.start()
    with wire_for(server) as w:
        assert [r.job.id for r in w.reserve(["kept"], max_jobs=10)] == [kept]


def test_reserve_does_not_lease_more_payload_than_one_answer_carries(server_factory: ServerFactory) -> None:
    # 8 jobs of 20,000 bytes against a 65,536-byte message: three payloads (60,000 bytes)
    # fit, a fourth would not, so the writer leases exactly three; the other five were
    # never leased at all (no attempt spent, nothing in their history), and the next
    # Reserve gets the next three.
    small = {"max_payload_bytes": 30000}
    server = server_factory(limits={"max_message_bytes": 65536}, queue_defaults={"limits": small})
    with wire_for(server) as w:
        ids = [w.enqueue("big", data=bytes([i]) * 20000) for i in range(8)]
        first = w.reserve(["big"], max_jobs=8)
        assert [r.job.id for r in first] == ids[:3]
        untouched = [w.get_job(i) for i in ids[3:]]
        assert [(j.attempt, len(j.attempts)) for j in untouched] == [(0, 0)] * 5
        second = w.reserve(["big"], max_jobs=8)
        assert [r.job.id for r in second] == ids[3:6]


@pytest.mark.parametrize("mode, placement", [("sync", "thread"), ("group", "process"), ("async", "process")])
def test_auto_puts_the_writer_where_the_persist_mode_wants_it(server_factory: ServerFactory, mode: str,
                                                               placement: str) -> None:
    # sync: every request waits for its own fsync, so the pipe hop (≈ 0.15–0.2 ms) is
    # saved; group/async: throughput, so the writer gets its own interpreter.
    server = server_factory(persist_mode=mode)
    assert any(f"writer={placement}" in line for line in server.output)
    writers = [c for c in children(server.pid) if WRITER_MODULE in cmdline(c)]
    assert len(writers) == (1 if placement == "process" else 0)


def _enqueue_writer_stopped_then_kill(server: ServerProcess, enqueue: Callable[[Wire], list[str]]) -> list[str]:
    """Make queue "lone" (through the writer), SIGSTOP the writer process, run ``enqueue``
    (which returns the ids it got acknowledged), then SIGKILL the server and the writer and
    wait until the writer is gone. Returns every acknowledged id, the first job's included."""
    writer = writer_of(server)
    with wire_for(server) as w:
        ids = [w.enqueue("lone")]  # the queue exists now (declaring one goes through the writer)
        os.kill(writer, signal.SIGSTOP)
        try:
            ids += enqueue(w)
        finally:
            server.kill()
            os.kill(writer, signal.SIGKILL)
    wait_for(lambda: not alive(writer), timeout=10, what="the stopped writer to go")
    return ids


def test_lone_writes_need_no_writer_hop_and_every_acknowledged_one_survives_kill_9(
        server_factory: ServerFactory) -> None:
    """A one-job enqueue with nothing else writing commits on the server's own lone-write
    connection: with the writer process stopped (SIGSTOP) such enqueues
    still succeed, so they took that path; then the server is SIGKILLed and every
    acknowledged one is there after a restart (the WAL was fdatasync-ed before each answer).
    (Sweeps are writes through the writer: none runs during the test.)"""
    server = server_factory(persist_mode="group", sweep_interval=600.0)
    ids = _enqueue_writer_stopped_then_kill(server, lambda w: [
        w.enqueue("lone", data=str(i).encode(), idempotency_key=f"k{i}" if i % 2 else "") for i in range(20)])
    server.start()
    with wire_for(server) as w:
        got = w.reserve(["lone"], max_jobs=100)
    assert sorted(r.job.id for r in got) == sorted(ids)


def test_lone_batches_need_no_writer_hop_and_every_acknowledged_one_survives_kill_9(
        server_factory: ServerFactory) -> None:
    """The same for a sequential producer's batches (plain jobs, at most 256 a batch): with
    the writer process stopped they still succeed, and after SIGKILL every job of every
    acknowledged batch is there."""
    server = server_factory(persist_mode="group", sweep_interval=600.0)
    ids = _enqueue_writer_stopped_then_kill(server, lambda w: [
        job_id for b in range(5)
        for job_id in w.enqueue_many([pb.EnqueueRequest(queue="lone", job_type="t",
                                                        payload=pb.Payload(data=f"{b}-{i}".encode()))
                                      for i in range(256 if b % 2 else 37)])])
    server.start()
    with wire_for(server) as w:
        got: list[str] = []
        while batch := w.reserve(["lone"], max_jobs=256):
            got += [r.job.id for r in batch]
    assert sorted(got) == sorted(ids) and len(ids) == 1 + 2 * 256 + 3 * 37


def test_writer_death_during_lone_writes_still_stops_the_server(server_factory: ServerFactory) -> None:
    """The writer process dies while a producer sends one job at a time (lone writes, which do
    not need it): the server still stops with exit code 1 and its stop line, and a restart
    serves every acknowledged job."""
    server = server_factory(persist_mode="group")
    acked: list[str] = []
    with wire_for(server) as w:
        for i in range(10):
            acked.append(w.enqueue("lone", data=str(i).encode()))
        os.kill(writer_of(server), signal.SIGKILL)
        for i in range(10, 2000):
            try:
                acked.append(w.enqueue("lone", data=str(i).encode()))
            except grpc.RpcError:
                break
        else:
            pytest.fail("the server kept serving without its writer")
    assert server.proc is not None
    assert server.proc.wait(30) == 1
    wait_for(lambda: any("sepp: stopped: the writer process exited" in line for line in server.output), timeout=15,
             what="the stop reason in the server's output")
    server.start()
    with wire_for(server) as w:
        got = w.reserve(["lone"], max_jobs=len(acked) + 10)
    assert sorted(r.job.id for r in got) == sorted(acked)
