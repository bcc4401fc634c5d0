"""The one stub wrapper of the tests: a channel with the producer, worker and admin stubs
and the metadata every admin call carries. ``producer.Stubs``, ``worker.Wire`` and
``admin.AdminStubs`` add the verbs of their test families on top of it."""

from __future__ import annotations

from collections.abc import Sequence

import grpc

from sepp.api.v1 import admin_pb2_grpc, producer_pb2_grpc, worker_pb2_grpc

#: Timeout of the unary calls the helpers make, seconds.
CALL_TIMEOUT = 20.0

#: gRPC channel options without a client-side size cap, so a request over the server's
#: max_message_bytes really reaches the server and the server refuses it.
CHANNEL_OPTIONS = (("grpc.max_send_message_length", -1), ("grpc.max_receive_message_length", -1))


class StubSet:
    """An insecure channel to ``target`` with the three service stubs.

    ``options`` are gRPC channel options (default: gRPC's own); ``token`` makes
    ``metadata`` carry ``authorization: Bearer <token>`` for admin calls.
    """

    def __init__(self, target: str, *, options: Sequence[tuple[str, int]] = (), token: str | None = None) -> None:
        self.channel = grpc.insecure_channel(target, options=list(options)) if options else \
            grpc.insecure_channel(target)
        self.producer = producer_pb2_grpc.ProducerServiceStub(self.channel)
        self.worker = worker_pb2_grpc.WorkerServiceStub(self.channel)
        self.admin = admin_pb2_grpc.AdminServiceStub(self.channel)
        self.metadata: tuple[tuple[str, str], ...] = (("authorization", f"Bearer {token}"),) if token else ()

    def close(self) -> None:
        """Close the channel."""
        self.channel.close()
