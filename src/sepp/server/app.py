"""Composition root of ``sepp serve``: builds store, registry, engine, sweeper, gRPC and
HTTP front ends; starts them in order and stops them in reverse (STYLE habit 11).

TLS: ``load_server_tls`` checks the files named by ``tls_cert`` / ``tls_key`` /
``tls_client_ca`` when the server is built, before the store opens or a port is bound; both
listeners then serve TLS only. Readiness: ``Readiness`` probes the store every
``readiness_interval`` seconds and flips the gRPC health service; ``/readyz`` asks it.

Stop order on SIGTERM: readiness and health go NOT_SERVING, gRPC stops taking calls and lets
in-flight ones finish (their commits included) within ``shutdown_grace``, the
sweeper stops, the committer commits what was submitted, the HTTP server closes.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import gc
import logging
import os
import signal
import socket
from collections.abc import Callable, Iterator
from typing import Any

import uvicorn

from sepp.api.v1 import admin_pb2_grpc
from sepp.domain.clock import SYSTEM_CLOCK, Clock
from sepp.server.admin import AdminEngine
from sepp.server.auth import Authenticator
from sepp.server.cluster import Cluster
from sepp.server.config import ServerConfig
from sepp.server.engine import JobEngine
from sepp.server.errors import EngineError
from sepp.server.event_relay import EventRelay
from sepp.server.http.app import build_http_app
from sepp.server.listen import address_in_use, check_free
from sepp.server.metrics import Metrics
from sepp.server.notifier import Notifier
from sepp.server.parts import ServerParts
from sepp.server.periodic.admin import PeriodicAdmin, check_job
from sepp.server.periodic.scheduler import PeriodicScheduler
from sepp.server.queues import QueueRegistry
from sepp.server.readiness import Readiness
from sepp.server.rpc.admin import AdminServicer
from sepp.server.rpc.server import GrpcFront
from sepp.server.rpc.timing import RpcMetrics
from sepp.server.sql_enqueues import SqlEnqueues
from sepp.server.sweeper import Sweeper
from sepp.server.tls import load_server_tls
from sepp.storage.base import Store
from sepp.storage.config import ConfigError
from sepp.storage.factory import open_store

log = logging.getLogger("sepp.server")


class _Uvicorn(uvicorn.Server):
    """uvicorn without its own signal handling (sepp owns SIGTERM/SIGINT) and without its
    fixed pauses at the stop: uvicorn looks at ``should_exit`` every 0.1 s and then sleeps
    0.1 s more before it waits for the open connections (measured: 0.2 s of the 0.26 s a
    SIGTERM stop took). ``exit()`` wakes the main loop at once; ``shutdown`` asks every
    connection to close (a response being sent is finished first, as in uvicorn), then
    waits, looking every ``_POLL`` seconds, until the connections and their tasks are gone —
    the same steps as uvicorn's ``shutdown`` (with ``lifespan="off"`` and no graceful-stop
    timeout, which sepp does not set: ``SeppServer.stop`` bounds the whole wait). Both
    rely on uvicorn internals (written against 0.55); a uvicorn without them gets its own
    loop and shutdown back, only slower to stop."""

    _POLL = 0.005

    def __init__(self, config: uvicorn.Config) -> None:
        super().__init__(config)
        self._exit = asyncio.Event()

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield

    def exit(self) -> None:
        """Stop serving: the main loop ends now, not at its next 0.1 s tick."""
        self.should_exit = True
        self._exit.set()

    async def main_loop(self) -> None:
        if not hasattr(self, "on_tick"):  # a uvicorn without the hook this relies on: its own loop
            await super().main_loop()
            return
        counter = 0
        while not await self.on_tick(counter):  # the Date header, once a second (every 10th tick)
            counter = (counter + 1) % 864000
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._exit.wait(), 0.1)

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        state: Any = getattr(self, "server_state", None)
        if not (hasattr(self, "servers") and hasattr(self, "lifespan") and hasattr(state, "connections")
                and hasattr(state, "tasks")):  # a uvicorn whose internals differ: its own (slower) stop
            await super().shutdown(sockets)
            return
        for server in self.servers:  # stop accepting connections
            server.close()
        for sock in sockets or []:
            sock.close()
        for connection in list(state.connections):  # idle ones close now, busy ones after their response
            connection.shutdown()
        while (state.connections or state.tasks) and not self.force_exit:  # noqa: ASYNC110 - uvicorn has no event for it
            await asyncio.sleep(self._POLL)
        for server in self.servers:
            await server.wait_closed()
        if not self.force_exit:
            await self.lifespan.shutdown()


class SeppServer:
    """One ``sepp serve`` process. ``grpc_port``/``http_port`` are known after ``start()``.

    ``clock`` is the server's one source of time: it goes into the node's ``parts``
    (``ServerParts``), which every service — engine, sweeper, admin engine, front ends —
    is handed here.
    """

    def __init__(self, config: ServerConfig, *, clock: Clock = SYSTEM_CLOCK) -> None:
        self.config = config
        self.clock = clock
        self.node = config.node_name or socket.gethostname()
        #: The checked TLS files (None: plaintext). Raises ``ConfigError`` for a bad file.
        self.tls = load_server_tls(config)
        #: ``clock.monotonic()`` at construction (uptime in GetServerInfo and the UI).
        self.started = clock.monotonic()
        #: The backend ``config.storage`` names (``open_store``); used only through ``Store``.
        self.store: Store = open_store(config, clock)
        self.registry = QueueRegistry(config.queue_defaults, config.strict, config.limits.max_encoding_bytes,
                                      config.limits.max_queues)
        self.notifier = Notifier()
        #: What every service shares (clock, store, queues, notifier, events, limits, logs).
        self.parts = parts = ServerParts.build(config, self.store, self.registry, self.notifier, clock=clock)
        self.engine = JobEngine(parts)
        self.sweeper = Sweeper(parts, config.sweep_interval)
        #: Periodic schedules: the config's [[periodic]] tables and the admin's, run
        #: on every node (docs/periodic.md).
        self.periodic = PeriodicScheduler(parts, self.engine, config.periodic)
        #: The node's metrics, fed by the engine's events; /metrics renders them.
        self.metrics = Metrics(parts, gauge_interval=config.metrics_gauge_interval,
                               sweep_skipped=lambda: self.sweeper.skipped)
        #: Wake-ups, queue settings and the heartbeat shared with the other nodes.
        self.cluster = Cluster(parts, self.node, config.grpc_listen)
        #: Live job events to and from the other nodes (``WatchJobs`` sees every node's).
        self.relay = EventRelay(parts)
        #: Jobs committed through the SQL functions: counted, and live events for watchers.
        self.sql_enqueues = SqlEnqueues(parts)
        #: Tokens and roles of every API and the UI, with the failure counts.
        self.auth = Authenticator.from_config(config.auth, config.admin_token)
        self.metrics.auth_failures_from(lambda: self.auth.failures)
        self.grpc = GrpcFront(parts, self.engine, self.started, self.node,
                              interceptors=[RpcMetrics(self.metrics.observe_rpc)], tls=self.tls, auth=self.auth,
                              rpc_observe=self.metrics.observe_rpc)
        #: Does the storage answer? Flips the gRPC health service; ``/readyz`` asks it.
        self.readiness = Readiness(self.store, config.readiness_interval, self.grpc.set_serving)
        self.admin = AdminEngine(parts, self.store.admin)
        self.admin.periodic = PeriodicAdmin(parts, self.periodic)
        self.grpc.add_service(admin_pb2_grpc.add_AdminServiceServicer_to_server,
                              AdminServicer(parts, self.admin), "AdminService")
        self.http: _Uvicorn | None = None
        self._http_task: asyncio.Task[None] | None = None
        self._http_sock: socket.socket | None = None
        self.http_port = 0
        self._stopping = False

    @property
    def grpc_port(self) -> int:
        """The bound gRPC port."""
        return self.grpc.port

    def serving(self) -> bool:
        """True between start and the beginning of stop."""
        return not self._stopping

    async def start(self) -> None:
        """Open storage, load queues, start the sweeper and both listeners.

        Raises ``RuntimeError`` / ``OSError`` when a port cannot be bound — ``OSError``
        ``port N is in use (another sepp?); choose another with --grpc-listen`` (or
        ``--http-listen``) before the store is opened when a port is taken
        (``sepp.server.listen``) — and ``StoreError`` when the database cannot be opened.
        """
        check_free({"grpc_listen": self.config.grpc_listen, "http_listen": self.config.http_listen})
        await self.store.open()
        try:
            changed = self.registry.load(await self.store.load_queues(), dict(self.config.queues))
            for q in changed:
                await self.store.upsert_queue(q.record(), self.clock.now())
                q.persisted = True
            for spec in self.config.periodic:  # a job its queue would refuse is a start error
                try:
                    check_job(self.parts, spec)
                except EngineError as exc:
                    raise ConfigError(f"periodic[{self.config.periodic.index(spec)}] ({spec.name}): {exc}") from None
            await self.sweeper.start()
            await self.periodic.start()
            await self.admin.start()
            await self.grpc.start()
            host = self.config.grpc_listen.rpartition(":")[0]
            self.cluster.address = f"{host}:{self.grpc_port}"
            await self.cluster.start()
            await self.relay.start()
            await self.sql_enqueues.start()
            await self.readiness.start()
            if self.config.http_listen:
                await self._start_http()
        except BaseException:
            await self.readiness.stopping()
            # Stop the gRPC server too (started or not): left to the garbage collector after
            # the loop closed, it printed a Server.__del__ traceback under the clean error line.
            with contextlib.suppress(Exception):
                await self.grpc.stop(0)
            await self._stop_services()
            raise

    async def _stop_services(self) -> None:
        """Stop the background services (periodic schedules, sweeper, relay, cluster, admin
        engine), in that order, then close the store: the tail of both a failed start and
        ``stop`` (a failed start calls each stop whether or not that service started)."""
        for service in (self.periodic, self.sweeper, self.relay, self.sql_enqueues, self.cluster, self.admin):
            await service.stop()
        await self.store.close()

    async def _start_http(self) -> None:
        host, _, port = self.config.http_listen.rpartition(":")
        sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((host.strip("[]"), int(port)))
            sock.listen(128)
        except OSError as exc:
            sock.close()
            if exc.errno == errno.EADDRINUSE:  # taken since start() looked (check_free)
                raise address_in_use("http_listen", self.config.http_listen) from None
            raise OSError(f"cannot listen on {self.config.http_listen} (http_listen): {exc.strerror or exc}") from None
        sock.setblocking(False)
        self._http_sock = sock
        self.http_port = sock.getsockname()[1]
        app = build_http_app(self.parts, self.engine, self.serving, admin=self.admin, started=self.started,
                             node=self.node, metrics=self.metrics, ready=self.readiness.check, auth=self.auth)
        tls = self.tls.uvicorn_settings() if self.tls is not None else {}
        # log_config=None: uvicorn's lines go through sepp's handler (text or JSON, sepp.logs).
        self.http = _Uvicorn(uvicorn.Config(app, log_level="warning", lifespan="off", access_log=False,
                                            log_config=None, **tls))
        self._http_task = asyncio.create_task(self.http.serve(sockets=[sock]), name="sepp-http")

    async def stop(self) -> None:
        """Graceful stop (see module docstring). Idempotent."""
        if self._stopping:
            return
        self._stopping = True
        await self.readiness.stopping()
        # Idle workers' long-polls answer now instead of holding the stop up to their wait; so
        # do producers' waits for jobs (their clients ask again, of the next server).
        self.engine.end_long_polls()
        self.engine.end_waits()
        # Watch streams end now (UNAVAILABLE) instead of holding the stop up to the grace.
        self.parts.job_events.close()
        await self.grpc.stop(self.config.shutdown_grace)
        await self.metrics.stop()
        await self._stop_services()
        if self.http is not None and self._http_task is not None:
            self.http.exit()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._http_task, 5)
        if self._http_sock is not None:
            self._http_sock.close()


#: Seconds after the first stop signal within which another is taken as a copy of it, not
#: as "stop at once": a SIGTERM to a process group reaches sepp and its parent, and a parent
#: such as make passes its own on (``make serve``; a new user's trial, 2026-12-03). Two
#: deliberate Ctrl-C presses are further apart than this.
SIGNAL_ECHO = 0.25


def tune_gc() -> None:
    """Keep the garbage collector off the hot path (measured: +10–15% single enqueues/s).

    Everything allocated while starting (modules, config, templates) is moved to the
    permanent generation so no collection scans it again, and generation 0 is collected
    every 20,000 allocations instead of 700: request handling allocates many short-lived
    objects, very few of them in cycles.
    """
    gc.collect()
    gc.freeze()
    gc.set_threshold(20_000, 20, 100)


async def run(config: ServerConfig, announce: Callable[[SeppServer], None] | None = None) -> None:
    """Run a server until SIGTERM or SIGINT, then stop gracefully; a second SIGTERM or
    SIGINT during the stop (``SIGNAL_ECHO`` seconds or more after the first: one sooner is
    the same stop delivered twice) ends the process at once (exit 1) after aborting the store
    (``Store.abort``: the SQLite writer process is killed) — a crash for the calls in
    flight, nothing acknowledged is lost.

    Raises ``StoreFailed`` (after stopping) when the store can no longer write
    (``Store.failure``: the SQLite writer process died) — so the process exits non-zero and
    a supervisor starts it again.
    """
    server = SeppServer(config)
    await server.start()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    first_signal = [0.0]  # loop.time() of the first stop signal

    def on_signal() -> None:
        if not stop.is_set():
            first_signal[0] = loop.time()
        stop.set()

    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, on_signal)
    tune_gc()
    if announce is not None:
        announce(server)
    stopping = asyncio.ensure_future(stop.wait())
    failing = asyncio.ensure_future(server.store.failure())
    await asyncio.wait((stopping, failing), return_when=asyncio.FIRST_COMPLETED)
    if failing.done():
        failure = failing.result()
        log.error("stopping: %s", failure)
        await server.stop()
        raise failure
    failing.cancel()
    log.info("stopping: draining in-flight calls and pending commits (a second signal stops at once)")

    def force() -> None:
        after = loop.time() - first_signal[0]
        if after < SIGNAL_ECHO:  # the same stop delivered twice (a process group's and a parent's)
            log.info("a second stop signal %.0f ms after the first: taken as the same stop", after * 1000)
            return
        log.error("second stop signal %.0f ms after the first: stopping at once; calls in flight are lost, "
                  "acknowledged ones are not", after * 1000)
        server.store.abort()
        os._exit(1)

    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, force)
    await server.stop()
    log.info("stopped: everything acknowledged is committed")
