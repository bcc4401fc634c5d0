"""A client made without a target connects to ``$SEPP_SERVER``, as ``sepp.App()`` and every
``sepp`` command do; a target given wins over the variable; unset (or empty), the default
``127.0.0.1:7700``.

A new user's report: ``Client()`` ignored ``SEPP_SERVER`` (it dialled 127.0.0.1:7700) while
``App()`` honoured it. Checked against a real server: the enqueue of a client made without a
target reaches it, and one of a client given a target reaches that target while the variable
names a closed port.
"""

from __future__ import annotations

import pytest
from support.worker import wire_for

from sepp import AsyncClient, Client, EnqueueRequest
from sepp.api.v1 import common_pb2 as pb
from sepp.client.admin import AdminClient
from sepp.testing import ServerProcess
from sepp.testing.process import free_port

pytestmark = pytest.mark.sqlite_only(reason="backend-neutral: where a client connects")


def stored(server: ServerProcess, job_id: str) -> bool:
    with wire_for(server) as w:
        return w.get_job(job_id).state == pb.READY


def test_a_client_without_a_target_takes_sepp_server(shared_server: ServerProcess, fresh_queue: str,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SEPP_SERVER", f"grpc://{shared_server.grpc_target}")  # normalized as a given one
    with Client() as client:
        assert client.target == shared_server.grpc_target
        ack = client.enqueue(EnqueueRequest(fresh_queue, "t"))
    assert stored(shared_server, ack.job_id)
    with AdminClient() as admin:
        assert admin.target == shared_server.grpc_target
        assert admin.get_job(ack.job_id).id == ack.job_id


async def test_the_async_client_too(shared_server: ServerProcess, fresh_queue: str,
                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SEPP_SERVER", shared_server.grpc_target)
    async with AsyncClient() as client:
        assert client.target == shared_server.grpc_target
        ack = await client.enqueue(EnqueueRequest(fresh_queue, "t"))
    assert stored(shared_server, ack.job_id)


async def test_a_target_given_wins_over_sepp_server(shared_server: ServerProcess, fresh_queue: str,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SEPP_SERVER", f"127.0.0.1:{free_port()}")  # nothing listens there
    with Client(shared_server.grpc_target) as client:
        ack = client.enqueue(EnqueueRequest(fresh_queue, "t"))
    async with AsyncClient(shared_server.grpc_target) as aclient:
        aack = await aclient.enqueue(EnqueueRequest(fresh_queue, "t"))
    assert stored(shared_server, ack.job_id) and stored(shared_server, aack.job_id)


@pytest.mark.parametrize("value", [None, ""])
def test_without_sepp_server_the_default_port(monkeypatch: pytest.MonkeyPatch, value: str | None) -> None:
    if value is None:
        monkeypatch.delenv("SEPP_SERVER", raising=False)
    else:
        monkeypatch.setenv("SEPP_SERVER", value)  # empty: as if unset
    with Client() as client:
        assert client.target == "127.0.0.1:7700"
    assert AsyncClient().target == "127.0.0.1:7700"
    with AdminClient() as admin:
        assert admin.target == "127.0.0.1:7700"
