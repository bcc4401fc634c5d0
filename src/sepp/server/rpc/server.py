"""Builds the grpc.aio server: services, health, reflection, message caps."""

from __future__ import annotations

from collections.abc import Sequence

import grpc
from google.protobuf import descriptor_pool
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from sepp.api.v1 import admin_pb2, producer_pb2, worker_pb2
from sepp.server.auth import Authenticator
from sepp.server.engine import JobEngine
from sepp.server.listen import address_in_use, in_use
from sepp.server.parts import ServerParts
from sepp.server.rpc.authz import Authorize
from sepp.server.rpc.interceptor import InternalErrors
from sepp.server.rpc.producer import ProducerServicer
from sepp.server.rpc.registration import register
from sepp.server.rpc.timing import Observe
from sepp.server.rpc.worker import WorkerServicer
from sepp.server.tls import ServerTLS

SERVICE_NAMES = (
    producer_pb2.DESCRIPTOR.services_by_name["ProducerService"].full_name,
    worker_pb2.DESCRIPTOR.services_by_name["WorkerService"].full_name,
    admin_pb2.DESCRIPTOR.services_by_name["AdminService"].full_name,
)


class GrpcFront:
    """The gRPC listener. ``port`` is known after ``start()`` (useful with port 0). With
    ``tls`` it serves TLS only (mutual TLS when ``tls`` has a client CA)."""

    def __init__(self, parts: ServerParts, engine: JobEngine, started: float, node: str,
                 interceptors: Sequence[grpc.aio.ServerInterceptor] = (), *, tls: ServerTLS | None = None,
                 auth: Authenticator | None = None, rpc_observe: Observe | None = None) -> None:
        """``interceptors`` run after the role check and before the built-in ``InternalErrors``
        (the RPC timing); ``rpc_observe(method, code, seconds)`` records the calls the
        role check refuses, which those never see."""
        config = parts.config
        cap = config.limits.max_message_bytes
        self.config = config
        self.tls = tls
        #: Tokens and roles; built from ``config`` when not given.
        self.auth = auth if auth is not None else Authenticator.from_config(config.auth, config.admin_token)
        self.server = grpc.aio.server(options=[
            ("grpc.max_receive_message_length", cap),
            ("grpc.max_send_message_length", cap),
            ("grpc.so_reuseport", 0),
        ], interceptors=[Authorize(self.auth, rpc_observe), *interceptors, InternalErrors()])  # roles; no UNKNOWN
        register(self.server, producer_pb2.DESCRIPTOR.services_by_name["ProducerService"],
                 ProducerServicer(parts, engine, started, node))
        register(self.server, worker_pb2.DESCRIPTOR.services_by_name["WorkerService"], WorkerServicer(parts, engine))
        self.health = health.aio.HealthServicer()
        health_pb2_grpc.add_HealthServicer_to_server(self.health, self.server)
        reflection.enable_server_reflection(
            (*SERVICE_NAMES, health.SERVICE_NAME, reflection.SERVICE_NAME), self.server)
        self.port = 0

    def add_service(self, _generated_register: object, servicer: object, name: str) -> None:
        """Register another sepp service (admin) by its name in ``sepp.api.v1``, with the
        same hardened decoding; call before ``start``."""
        service = descriptor_pool.Default().FindServiceByName(f"sepp.api.v1.{name}")
        register(self.server, service, servicer)

    async def start(self) -> None:
        """Bind and serve. Raises ``OSError`` (``port N is in use (another sepp?); choose
        another with --grpc-listen``) when the port is taken, ``RuntimeError`` when the address
        cannot be bound for another reason."""
        host, _, port = self.config.grpc_listen.rpartition(":")
        if in_use(self.config.grpc_listen):  # gRPC core would log its own line and GRPC_VERBOSITY advice
            raise address_in_use("grpc_listen", self.config.grpc_listen)
        try:
            if self.tls is not None:
                self.port = self.server.add_secure_port(f"{host}:{port}", self.tls.grpc_credentials())
            else:
                self.port = self.server.add_insecure_port(f"{host}:{port}")
        except RuntimeError as exc:
            said = str(exc).split("; set GRPC_VERBOSITY", 1)[0]  # advice meant for gRPC's developers
            raise RuntimeError(f"cannot listen on {self.config.grpc_listen}: {said}") from exc
        if self.port == 0:
            raise RuntimeError(f"cannot listen on {self.config.grpc_listen}")
        await self.server.start()
        for name in ("", *SERVICE_NAMES):
            await self.health.set(name, health_pb2.HealthCheckResponse.SERVING)

    async def set_serving(self, serving: bool) -> None:
        """Report SERVING or NOT_SERVING for ``""`` and every sepp service (the readiness
        verdict, ``sepp.server.readiness``); no effect once the graceful stop began."""
        status = health_pb2.HealthCheckResponse.SERVING if serving else health_pb2.HealthCheckResponse.NOT_SERVING
        for name in ("", *SERVICE_NAMES):
            await self.health.set(name, status)

    async def stop(self, grace: float) -> None:
        """Refuse new RPCs, let in-flight ones finish within ``grace`` seconds."""
        await self.health.enter_graceful_shutdown()
        await self.server.stop(grace)
