"""Nothing answers UNKNOWN: an exception no handler mapped comes back as
INTERNAL with ErrorInfo reason INTERNAL_ERROR and a short message, is logged with its
traceback, and the server keeps serving; an engine or store error that escaped its servicer
gets its catalogued status. In-process servers on real SQLite files and real gRPC channels;
the failures are functions injected into the engine, nothing of storage or transport is mocked.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import grpc
import pytest

from sepp import wire
from sepp.api.v1 import admin_pb2 as apb
from sepp.api.v1 import admin_pb2_grpc, producer_pb2_grpc
from sepp.api.v1 import common_pb2 as pb
from sepp.api.v1 import producer_pb2 as ppb
from sepp.client import _core
from sepp.errors import ServerError, Unavailable
from sepp.server.app import SeppServer
from sepp.server.config import ServerConfig
from sepp.server.rpc.interceptor import InternalErrors
from sepp.storage.config import SQLiteSettings
from sepp.storage.errors import StoreError

SECRET = "do-not-echo-this-" + "x" * 300


def _boom(*_args: Any, **_kwargs: Any) -> Any:
    raise RuntimeError(f"bug while handling {SECRET}")


async def _with_server(tmp: Path, body: Callable[[SeppServer, grpc.aio.Channel], Awaitable[None]]) -> None:
    config = ServerConfig(data_dir=tmp, grpc_listen="127.0.0.1:0", http_listen="",
                          sqlite=SQLiteSettings(writer="thread"), sweep_interval=0.05, shutdown_grace=1.0)
    server = SeppServer(config)
    await server.start()
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{server.grpc_port}") as channel:
            await body(server, channel)
    finally:
        await server.stop()


def _answer(exc: grpc.aio.AioRpcError) -> tuple[grpc.StatusCode, str, dict[str, str], str]:
    status = wire.status_from_metadata(exc.trailing_metadata())
    assert status is not None, "no google.rpc.Status in the trailers"
    info = wire.unpack_details(status)["error_info"]
    return exc.code(), info.reason, dict(info.metadata), status.message


def test_an_unexpected_exception_is_internal_error_logged_with_its_traceback(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    async def body(server: SeppServer, channel: grpc.aio.Channel) -> None:
        producer = producer_pb2_grpc.ProducerServiceStub(channel)
        server.engine.enqueue = _boom  # type: ignore[method-assign]
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await producer.Enqueue(pb.EnqueueRequest(queue="q", job_type="t"))
        code, reason, meta, message = _answer(info.value)
        assert (code, reason) == (grpc.StatusCode.INTERNAL, "INTERNAL_ERROR")
        assert meta == {"method": "/sepp.api.v1.ProducerService/Enqueue"}
        assert "RuntimeError" in message and SECRET not in message and len(message) < 200
        assert info.value.details() == message
        # The clients classify it: a ServerError keeping the reason, never retried.
        for error in (_core.error_from_rpc(info.value), _core.error_from_rpc(info.value, "t", admin=True)):
            assert type(error) is ServerError and error.reason == "INTERNAL_ERROR" and not error.transient
            assert error.code == grpc.StatusCode.INTERNAL and "RuntimeError" in str(error)
        # The server keeps serving.
        assert (await producer.GetServerInfo(ppb.GetServerInfoRequest())).version

    with caplog.at_level(logging.ERROR, logger="sepp.rpc"):
        asyncio.run(_with_server(tmp_path, body))
    (record,) = [r for r in caplog.records if r.name == "sepp.rpc"]
    assert "/sepp.api.v1.ProducerService/Enqueue" in record.getMessage()
    assert record.exc_info is not None and SECRET in str(record.exc_info[1])  # the log keeps the detail
    assert "Traceback" in caplog.text and "_boom" in caplog.text


def test_admin_and_worker_methods_are_covered_too_and_a_store_error_keeps_its_status(tmp_path: Path) -> None:
    async def body(server: SeppServer, channel: grpc.aio.Channel) -> None:
        admin = admin_pb2_grpc.AdminServiceStub(channel)
        server.admin.queue = _boom  # type: ignore[method-assign]
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await admin.GetQueue(apb.GetQueueRequest(name="q"))
        assert _answer(info.value)[:2] == (grpc.StatusCode.INTERNAL, "INTERNAL_ERROR")

        def store_down() -> Any:
            raise StoreError("the disk went away")

        # GetServerInfo maps nothing itself: a store error escaping it is still UNAVAILABLE.
        server.parts.queues.all = store_down  # type: ignore[method-assign]
        producer = producer_pb2_grpc.ProducerServiceStub(channel)
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await producer.GetServerInfo(ppb.GetServerInfoRequest())
        assert _answer(info.value)[:2] == (grpc.StatusCode.UNAVAILABLE, "STORE_UNAVAILABLE")
        assert isinstance(_core.error_from_rpc(info.value), Unavailable)

    asyncio.run(_with_server(tmp_path, body))


def test_streaming_methods_are_guarded(caplog: pytest.LogCaptureFixture) -> None:
    # sepp has no streaming method yet; the interceptor guards any, shown on a bare server.
    async def server_stream(request: bytes, _context: Any) -> AsyncIterator[bytes]:
        yield b"first"
        raise ValueError("broken stream")

    async def bidi(requests: AsyncIterator[bytes], _context: Any) -> AsyncIterator[bytes]:
        async for item in requests:
            yield item
            raise KeyError("broken bidi")

    async def main() -> None:
        server = grpc.aio.server(interceptors=[InternalErrors()])
        server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler("t.S", {
            "Down": grpc.unary_stream_rpc_method_handler(server_stream),
            "Both": grpc.stream_stream_rpc_method_handler(bidi)}),))
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        try:
            async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
                for call, first in ((channel.unary_stream("/t.S/Down")(b"x"), b"first"),
                                    (channel.stream_stream("/t.S/Both")(iter([b"x", b"y"])), b"x")):
                    got = []
                    with pytest.raises(grpc.aio.AioRpcError) as info:
                        async for item in call:
                            got.append(item)
                    assert got == [first]  # what was sent before the failure arrives
                    assert _answer(info.value)[:2] == (grpc.StatusCode.INTERNAL, "INTERNAL_ERROR")
        finally:
            await server.stop(0)

    with caplog.at_level(logging.ERROR, logger="sepp.rpc"):
        asyncio.run(main())
    logged = {r.getMessage().split()[3].rstrip(";") for r in caplog.records if r.name == "sepp.rpc"}
    assert logged == {"/t.S/Down", "/t.S/Both"}
