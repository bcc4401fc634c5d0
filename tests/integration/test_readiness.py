"""Health and readiness: ``/healthz`` is "the process is alive" (200, also while
stopping); ``/readyz`` and the gRPC health service (``""`` and every sepp service) say
whether the storage answers a trivial query within 1 s, and flip when it stops answering
and when it answers again; both say "not ready" while the server stops.

The storage is made to stop answering for real, per backend: on SQLite the writer process
(the server's child) is stopped with SIGSTOP and continued with SIGCONT; on PostgreSQL the
server reaches the database through a TCP proxy of the test (``support.proxy``) that is
paused and resumed — no mock, the probe goes over the same connections as the jobs.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import grpc
import httpx
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from support.backends import PG_TEST_DSN
from support.proxy import PausableProxy
from support.servers import ServerFactory
from support.waiting import wait_for

from sepp.testing import ServerProcess

pytestmark = pytest.mark.timeout(90)

SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING
#: The services whose health is reported (besides "", the server as a whole).
SERVICES = ("sepp.api.v1.ProducerService", "sepp.api.v1.WorkerService", "sepp.api.v1.AdminService")


def _writer_pid(server: ServerProcess) -> int:
    """The SQLite writer process: the server's child running ``sepp.storage.sqlite.writer``."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        if ppid == server.pid and b"sepp.storage.sqlite.writer" in cmdline:
            return int(entry.name)
    raise AssertionError(f"no writer process under server {server.pid}")


@pytest.fixture
def proxy() -> Iterator[PausableProxy]:
    """A pausable TCP proxy in front of the test PostgreSQL."""
    parts = urlsplit(PG_TEST_DSN)
    relay = PausableProxy(parts.hostname or "127.0.0.1", parts.port or 5432)
    yield relay
    relay.close()


def _through(proxy: PausableProxy) -> str:
    """``PG_TEST_DSN`` with its host and port replaced by the proxy's."""
    parts = urlsplit(PG_TEST_DSN)
    user = f"{parts.username}@" if parts.username else ""
    return urlunsplit(parts._replace(netloc=f"{user}127.0.0.1:{proxy.port}"))


@pytest.fixture
def outage(backend: str, server_factory: ServerFactory,
           proxy: PausableProxy) -> tuple[ServerProcess, Callable[[bool], None]]:
    """A server probing its storage every 0.1 s, and ``answering(flag)``: make its storage
    stop answering (False) or answer again (True) — really (module docstring)."""
    if backend == "postgres":
        server = server_factory(readiness_interval=0.1, postgres_dsn=_through(proxy))

        def answering(flag: bool) -> None:
            proxy.resume() if flag else proxy.pause()
    else:
        server = server_factory(readiness_interval=0.1)
        writer = _writer_pid(server)

        def answering(flag: bool) -> None:
            os.kill(writer, signal.SIGCONT if flag else signal.SIGSTOP)
    return server, answering


@contextmanager
def _health(server: ServerProcess) -> Iterator[Callable[[str], int]]:
    with grpc.insecure_channel(server.grpc_target) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        yield lambda service: int(stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=5).status)


def _readyz(web: httpx.Client) -> tuple[int, dict[str, str]]:
    answer = web.get("/readyz")
    return answer.status_code, answer.json()


def test_readyz_and_grpc_health_flip_when_the_storage_stops_and_comes_back(
        outage: tuple[ServerProcess, Callable[[bool], None]]) -> None:
    server, answering = outage
    with _health(server) as health, httpx.Client(base_url=server.http_url, timeout=10) as web:
        assert _readyz(web) == (200, {"status": "ready"})
        assert [health(name) for name in ("", *SERVICES)] == [SERVING] * 4
        answering(False)
        try:
            wait_for(lambda: health("") == NOT_SERVING, what="gRPC health NOT_SERVING")
            assert [health(name) for name in SERVICES] == [NOT_SERVING] * 3
            code, body = _readyz(web)
            assert code == 503 and body["status"] == "not ready"
            assert "within 1 s" in body["reason"]
            assert web.get("/healthz").status_code == 200  # alive all the same
        finally:
            answering(True)
        wait_for(lambda: health("") == SERVING, what="gRPC health SERVING again")
        assert [health(name) for name in SERVICES] == [SERVING] * 3
        assert _readyz(web) == (200, {"status": "ready"})


def test_while_stopping_readyz_is_503_and_healthz_stays_200(
        outage: tuple[ServerProcess, Callable[[bool], None]]) -> None:
    server, answering = outage
    with httpx.Client(base_url=server.http_url, timeout=10) as web:
        answering(False)  # the stop then waits for the storage: the HTTP side stays up meanwhile
        try:
            assert server.proc is not None
            server.proc.send_signal(signal.SIGTERM)
            wait_for(lambda: web.get("/readyz").json() == {"status": "stopping"}, what="/readyz stopping")
            assert web.get("/readyz").status_code == 503
            alive = web.get("/healthz")
            assert (alive.status_code, alive.json()) == (200, {"status": "stopping"})
        finally:
            answering(True)
    assert server.proc.wait(30) == 0


def test_a_grpc_health_watch_sees_not_serving_when_the_stop_begins(server_factory: ServerFactory) -> None:
    server = server_factory()
    with grpc.insecure_channel(server.grpc_target) as channel:
        stream = health_pb2_grpc.HealthStub(channel).Watch(health_pb2.HealthCheckRequest(service=""), timeout=30)
        seen = [next(stream).status]
        assert seen == [SERVING]
        assert server.proc is not None
        server.proc.send_signal(signal.SIGTERM)
        try:
            for answer in stream:  # the stream ends when the server closes it
                seen.append(answer.status)
                if answer.status == NOT_SERVING:
                    break
        except grpc.RpcError:
            pass
    assert seen[-1] == NOT_SERVING, seen
    assert server.proc.wait(30) == 0
