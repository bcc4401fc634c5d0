"""Admin API authentication (SPEC §4): with an admin_token, calls need ``authorization: Bearer``."""

from __future__ import annotations

from collections.abc import Callable

import grpc
from support.admin import connect
from support.failures import fails as refusal

from sepp.api.v1 import admin_pb2 as apb
from sepp.testing import ServerProcess

ServerFactory = Callable[..., ServerProcess]


def test_with_a_token_the_admin_api_needs_the_bearer_and_the_producer_api_does_not(
        server_factory: ServerFactory) -> None:
    server = server_factory(admin_token="s3cret-token")
    for token in (None, "wrong", "s3cret-token-but-longer"):
        with connect(server.grpc_target, token) as stubs:
            r = refusal(lambda s=stubs: s.call("ListQueues", apb.ListQueuesRequest()))  # type: ignore[misc]
            assert (r.code, r.reason) == (grpc.StatusCode.UNAUTHENTICATED, "UNAUTHENTICATED")
    with connect(server.grpc_target, "s3cret-token") as stubs:
        stubs.enqueue("authq")  # producers are not affected
        names = [q.name for q in stubs.call("ListQueues", apb.ListQueuesRequest()).queues]
        assert names == ["authq"]


def test_without_a_token_the_admin_api_is_open(server: ServerProcess) -> None:
    with connect(server.grpc_target) as stubs:
        assert stubs.call("ListQueues", apb.ListQueuesRequest()).queues == []
