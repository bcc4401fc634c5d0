"""The number of queues is bounded (``limits.max_queues``), through a real
``sepp serve`` in non-strict mode with a small limit. Before, producers could create queues
until GetServerInfo outgrew the admin CLI's 4 MiB receive limit (then the Client's 16 MiB),
after which every default ``Client.enqueue`` failed. Also: the admin client receives as
much as the Client (16 MiB), so a big ListQueues answer reads there too."""

from __future__ import annotations

import grpc
import pytest
from google.protobuf import field_mask_pb2
from pydantic import ValidationError
from support.admin import connect
from support.failures import fails as refusal
from support.servers import ServerFactory

from sepp import Client, EnqueueRequest
from sepp.api.v1 import admin_pb2 as apb
from sepp.api.v1 import common_pb2 as pb
from sepp.api.v1 import producer_pb2 as ppb
from sepp.client.admin import AdminClient
from sepp.limits import MAX_QUEUES, ServerLimits
from sepp.testing import ServerProcess


def _job(queue: str) -> pb.EnqueueRequest:
    return pb.EnqueueRequest(queue=queue, job_type="t", payload=pb.Payload(data=b"x"))


def test_enqueue_creates_queues_up_to_max_queues_and_refuses_one_more(server_factory: ServerFactory) -> None:
    server: ServerProcess = server_factory(limits={"max_queues": 3})
    with connect(server.grpc_target) as s:
        s.call("DeclareQueue", apb.DeclareQueueRequest(name="declared"))
        for name in ("a", "b"):  # 3 queues: at the limit
            s.producer.Enqueue(_job(name), timeout=10)
        past = refusal(lambda: s.producer.Enqueue(_job("c"), timeout=10))
        assert (past.code, past.reason) == (grpc.StatusCode.NOT_FOUND, "UNKNOWN_QUEUE")
        assert "max_queues = 3" in past.message and "delete" in past.message
        assert past.metadata.get("limit") == "3" and past.metadata.get("actual") == "3"
        s.producer.Enqueue(_job("a"), timeout=10)  # existing queues keep taking jobs
        # A batch validates every job before it creates a queue: one slot, two new names.
        s.call("DeleteQueue", apb.DeleteQueueRequest(name="declared"))
        resp = s.producer.EnqueueBatch(ppb.EnqueueBatchRequest(jobs=[_job("n1"), _job("n2"), _job("n1")]), timeout=10)
        kinds = [r.WhichOneof("outcome") for r in resp.results]
        assert kinds == ["ack", "rejection", "ack"]
        assert resp.results[1].rejection.code == pb.UNKNOWN_QUEUE
        names = {q.name for q in s.call("ListQueues", apb.ListQueuesRequest()).queues}
        assert names == {"a", "b", "n1"}
        # DeclareQueue of one more: FAILED_PRECONDITION / QUEUE_LIMIT_REACHED, nothing stored.
        full = refusal(lambda: s.call("DeclareQueue", apb.DeclareQueueRequest(name="d")))
        assert (full.code, full.reason) == (grpc.StatusCode.FAILED_PRECONDITION, "QUEUE_LIMIT_REACHED")
        assert full.metadata == {"field": "name", "limit": "3", "actual": "3"}
        s.call("DeclareQueue", apb.DeclareQueueRequest(name="a"))  # declaring an existing one is fine
        assert len(s.call("ListQueues", apb.ListQueuesRequest()).queues) == 3
    with Client(server.grpc_target) as client:  # the default client path (server info first) works
        assert client.enqueue(EnqueueRequest("b", "t")).job_id


def test_max_queues_is_bounded() -> None:
    assert ServerLimits().max_queues == 10_000
    assert ServerLimits(max_queues=MAX_QUEUES).max_queues == MAX_QUEUES
    for bad in (0, MAX_QUEUES + 1):
        with pytest.raises(ValidationError):
            ServerLimits(max_queues=bad)


def test_the_admin_client_reads_a_list_queues_answer_beyond_4_mib(server_factory: ServerFactory) -> None:
    """64 labels of 128 bytes per queue (~8.4 KB each): 520 queues make ~4.4 MiB."""
    server: ServerProcess = server_factory()
    labels = [f"{i:02d}" + "e" * 126 for i in range(64)]
    mask = field_mask_pb2.FieldMask(paths=["limits.allowed_encodings"])
    with connect(server.grpc_target) as s:
        for i in range(520):
            s.call("DeclareQueue", apb.DeclareQueueRequest(
                name=f"q{i:04d}", settings=pb.QueueSettings(limits=pb.QueueLimits(allowed_encodings=labels)),
                update_mask=mask))
    with AdminClient(server.grpc_target) as admin:
        queues = admin.list_queues()
    size = apb.ListQueuesResponse(queues=queues).ByteSize()
    assert len(queues) == 520 and size > 4 * 1024 * 1024
