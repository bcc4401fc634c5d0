"""Bounded error payloads: a refusal that names an argument
quotes at most 200 bytes of it, with its length, so the answer stays under gRPC's 8 KiB
metadata limit and arrives as its catalogued status with an ErrorInfo — not as
RESOURCE_EXHAUSTED "received metadata size exceeds hard limit".

One in-process server on a real SQLite file, called over a real channel with gRPC's default
limits; every RPC of the reproduction with a 10 KiB argument, and with 200 bytes (the limit:
quoted whole) and 201 (one past it: cut).
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.protobuf import field_mask_pb2

from sepp import wire
from sepp.api.v1 import admin_pb2 as apb
from sepp.api.v1 import admin_pb2_grpc, worker_pb2_grpc
from sepp.api.v1 import common_pb2 as pb
from sepp.api.v1 import worker_pb2 as wpb
from sepp.quoting import QUOTE_LIMIT, clip, quote
from sepp.server.app import SeppServer
from sepp.server.config import ServerConfig
from sepp.storage.config import SQLiteSettings

LEASE = str(uuid.uuid4())
NF, IA = grpc.StatusCode.NOT_FOUND, grpc.StatusCode.INVALID_ARGUMENT

#: (name, build the call from (admin stub, worker stub, argument), code, reason, field metadata)
Call = Callable[[Any, Any, str], Any]
CASES: list[tuple[str, Call, grpc.StatusCode, str, str | None]] = [
    ("GetJob", lambda a, w, x: a.GetJob(apb.GetJobRequest(job_id=x)), IA, "INVALID_ARGUMENT", "job_id"),
    ("DeleteJob", lambda a, w, x: a.DeleteJob(apb.DeleteJobRequest(job_id=x)), IA, "INVALID_ARGUMENT", "job_id"),
    ("CancelJob", lambda a, w, x: a.CancelJob(apb.CancelJobRequest(job_id=x)), IA, "INVALID_ARGUMENT", "job_id"),
    ("PauseQueue", lambda a, w, x: a.PauseQueue(apb.PauseQueueRequest(name=x)), NF, "QUEUE_NOT_FOUND", None),
    ("ResumeQueue", lambda a, w, x: a.ResumeQueue(apb.ResumeQueueRequest(name=x)), NF, "QUEUE_NOT_FOUND", None),
    ("GetQueue", lambda a, w, x: a.GetQueue(apb.GetQueueRequest(name=x)), NF, "QUEUE_NOT_FOUND", None),
    ("PurgeQueue", lambda a, w, x: a.PurgeQueue(apb.PurgeQueueRequest(queue=x)), NF, "QUEUE_NOT_FOUND", None),
    ("DeleteQueue", lambda a, w, x: a.DeleteQueue(apb.DeleteQueueRequest(name=x)), NF, "QUEUE_NOT_FOUND", None),
    ("FindJobByIdempotencyKey(key)",
     lambda a, w, x: a.FindJobByIdempotencyKey(apb.FindJobByIdempotencyKeyRequest(queue="q", key=x)),
     NF, "IDEMPOTENCY_KEY_NOT_FOUND", None),
    ("FindJobByIdempotencyKey(queue)",
     lambda a, w, x: a.FindJobByIdempotencyKey(apb.FindJobByIdempotencyKeyRequest(queue=x, key="k")),
     NF, "IDEMPOTENCY_KEY_NOT_FOUND", None),
    ("UpdateQueue(update_mask)", lambda a, w, x: a.UpdateQueue(apb.UpdateQueueRequest(
        name="q", settings=pb.QueueSettings(), update_mask=field_mask_pb2.FieldMask(paths=[x]))),
     IA, "INVALID_ARGUMENT", "update_mask"),
    ("Ack", lambda a, w, x: w.Ack(wpb.AckRequest(job_id=x, lease_id=LEASE)), IA, "INVALID_ARGUMENT", "job_id"),
    ("Ack(lease_id)", lambda a, w, x: w.Ack(wpb.AckRequest(job_id=LEASE, lease_id=x)), IA, "INVALID_ARGUMENT",
     "lease_id"),
    ("Nack", lambda a, w, x: w.Nack(wpb.NackRequest(job_id=x, lease_id=LEASE)), IA, "INVALID_ARGUMENT", "job_id"),
    ("ExtendLease", lambda a, w, x: w.ExtendLease(wpb.ExtendLeaseRequest(job_id=x, lease_id=LEASE)),
     IA, "INVALID_ARGUMENT", "job_id"),
]


@pytest.fixture(scope="module")
def answers(tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, int], grpc.aio.AioRpcError]:
    """Every case's error for arguments of 10 KiB, 201 and 200 bytes (one server for all)."""
    folder = tmp_path_factory.mktemp("bounded")

    async def main() -> dict[tuple[str, int], grpc.aio.AioRpcError]:
        server = SeppServer(ServerConfig(data_dir=Path(folder), grpc_listen="127.0.0.1:0", http_listen="",
                                         sqlite=SQLiteSettings(writer="thread"), shutdown_grace=1.0))
        await server.start()
        out: dict[tuple[str, int], grpc.aio.AioRpcError] = {}
        try:
            async with grpc.aio.insecure_channel(f"127.0.0.1:{server.grpc_port}") as channel:
                admin, worker = admin_pb2_grpc.AdminServiceStub(channel), worker_pb2_grpc.WorkerServiceStub(channel)
                await admin.DeclareQueue(apb.DeclareQueueRequest(name="q"))
                for name, call, *_ in CASES:
                    for size in (10_240, QUOTE_LIMIT + 1, QUOTE_LIMIT):
                        try:
                            await call(admin, worker, "x" * size)
                        except grpc.aio.AioRpcError as exc:
                            out[name, size] = exc
        finally:
            await server.stop()
        return out

    return asyncio.run(main())


def _details(exc: grpc.aio.AioRpcError) -> tuple[str, dict[str, str], str]:
    status = wire.status_from_metadata(exc.trailing_metadata())
    assert status is not None, f"{exc.code()} {exc.details()[:200]!r} without a google.rpc.Status"
    info = wire.unpack_details(status)["error_info"]
    return info.reason, dict(info.metadata), status.message


@pytest.mark.parametrize(("name", "code", "reason", "field"), [(c[0], c[2], c[3], c[4]) for c in CASES],
                         ids=[c[0] for c in CASES])
def test_a_10_kib_argument_gets_its_catalogued_refusal_quoting_200_bytes(
        answers: dict[tuple[str, int], grpc.aio.AioRpcError], name: str, code: grpc.StatusCode, reason: str,
        field: str | None) -> None:
    exc = answers[name, 10_240]
    assert exc.code() == code, exc.details()[:300]
    got_reason, meta, message = _details(exc)
    assert got_reason == reason
    if field is not None:
        assert meta.get("field") == field
    assert "'" + "x" * QUOTE_LIMIT + "…' (10240 bytes)" in message
    assert len(message.encode()) < 1024 and all(len(v) <= 256 for v in meta.values())


@pytest.mark.parametrize("name", [c[0] for c in CASES])
def test_at_the_limit_the_argument_is_quoted_whole_and_one_past_it_is_cut(
        answers: dict[tuple[str, int], grpc.aio.AioRpcError], name: str) -> None:
    whole = _details(answers[name, QUOTE_LIMIT])[2]
    assert repr("x" * QUOTE_LIMIT) in whole and "bytes)" not in whole
    cut = _details(answers[name, QUOTE_LIMIT + 1])[2]
    assert f"…' ({QUOTE_LIMIT + 1} bytes)" in cut and "x" * (QUOTE_LIMIT + 1) not in cut


def test_quote_and_clip_at_the_limit_and_one_past_it() -> None:
    assert quote("a" * 200) == repr("a" * 200)
    assert quote("a" * 201) == "'" + "a" * 200 + "…' (201 bytes)"
    assert quote("é" * 101) == "'" + "é" * 100 + "…' (202 bytes)"  # never cut inside a character
    assert clip("a" * 200) == "a" * 200 and clip("a" * 201) == "a" * 200 + "…"
    assert quote(b"\x00" * 300).startswith("\"b'") and len(quote("\x00" * 10_000)) < 4 * 200 + 40
