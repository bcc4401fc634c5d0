"""A failed EnqueueAtomic stays under gRPC's 8 KiB metadata limit (found by the fuzzer).

The AtomicRejections detail lists every failure by index (SPEC §2) while that fits in
``wire.MAX_ATOMIC_DETAIL_BYTES`` (6 KiB); beyond it the human message is kept for the
first eight failures only, and when even that does not fit the first failures are listed
and ErrorInfo ``count`` / ``listed`` say how many there were and how many travel.
Before, 256 failing jobs made a 10–16 KiB trailer that clients dropped as
RESOURCE_EXHAUSTED without details.
"""

from __future__ import annotations

import grpc
import pytest

from sepp import wire
from sepp.api.v1 import common_pb2 as pb
from sepp.api.v1 import producer_pb2 as ppb
from sepp.api.v1 import producer_pb2_grpc
from sepp.client import Client, ClientOptions
from sepp.errors import AtomicEnqueueError
from sepp.request import EnqueueRequest
from sepp.testing import ServerProcess

#: The server's default max_enqueue_batch: the largest atomic batch.
BATCH = 256
#: gRPC's default client metadata limit, bytes.
METADATA_LIMIT = 8 * 1024


def _refusal(server: ServerProcess, jobs: list[pb.EnqueueRequest]) -> grpc.RpcError:
    with grpc.insecure_channel(server.grpc_target) as channel:
        with pytest.raises(grpc.RpcError) as caught:
            producer_pb2_grpc.ProducerServiceStub(channel).EnqueueAtomic(ppb.EnqueueBatchRequest(jobs=jobs),
                                                                         timeout=20)
    return caught.value


def _trailer_bytes(error: grpc.RpcError) -> int:
    return sum(len(k) + len(v) for k, v in error.trailing_metadata()) + len((error.details() or "").encode())


def test_a_full_batch_of_small_failures_lists_every_one_within_the_limit(shared_server: ServerProcess) -> None:
    error = _refusal(shared_server, [pb.EnqueueRequest(queue="q", job_type="")] * BATCH)
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert _trailer_bytes(error) <= METADATA_LIMIT
    status = wire.status_from_metadata(error.trailing_metadata())
    assert status is not None
    found = wire.unpack_details(status)
    info, listed = found["error_info"], list(found["atomic"].rejections)
    assert (info.reason, info.metadata["count"], info.metadata["listed"]) == ("ATOMIC_BATCH_REJECTED", "256", "256")
    assert [r.index for r in listed] == list(range(BATCH))
    assert all(r.rejection.code == pb.JOB_TYPE_INVALID and r.rejection.field == "job_type" for r in listed)
    assert all(r.rejection.message for r in listed[:wire.ATOMIC_NAMED])
    assert not any(r.rejection.message for r in listed[wire.ATOMIC_NAMED:])


def test_failures_that_quote_long_input_are_listed_as_far_as_the_cap_and_counted(shared_server: ServerProcess) -> None:
    # A 100-byte custom key is too long (limit 64); the field names the (quoted) key.
    jobs = []
    for i in range(BATCH):
        job = pb.EnqueueRequest(queue="q", job_type="t")
        job.custom[f"{i:04d}" + "k" * 96].int_value = 1
        jobs.append(job)
    error = _refusal(shared_server, jobs)
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert _trailer_bytes(error) <= METADATA_LIMIT
    status = wire.status_from_metadata(error.trailing_metadata())
    assert status is not None
    found = wire.unpack_details(status)
    info, listed = found["error_info"], list(found["atomic"].rejections)
    assert info.metadata["count"] == "256"
    assert 0 < len(listed) < BATCH and info.metadata["listed"] == str(len(listed))
    assert [r.index for r in listed] == list(range(len(listed)))
    assert all(r.rejection.code == pb.CUSTOM_KEY_TOO_LONG for r in listed)
    assert f"{BATCH - len(listed)} not listed" in status.message

    with Client(shared_server.grpc_target, options=ClientOptions(validate_locally=False)) as client:
        with pytest.raises(AtomicEnqueueError) as caught:
            client.enqueue_atomic([EnqueueRequest("q", "t", custom={f"{i:04d}" + "k" * 96: 1}) for i in range(BATCH)])
    assert caught.value.total == BATCH
    assert [e.index for e in caught.value.errors] == list(range(len(listed)))
