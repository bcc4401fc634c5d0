"""Bad bytes on the wire get a catalogued INVALID_ARGUMENT, and the server keeps serving (SPEC §2).

The requests here cannot be built with the generated classes: corrupt wire format and
invalid UTF-8 in a string field are sent as raw bytes through a generic call.
"""

from __future__ import annotations

import grpc
import pytest

from sepp import wire
from sepp.api.v1 import common_pb2 as pb
from sepp.api.v1 import producer_pb2_grpc
from sepp.testing import ServerProcess


def _valid_prefix_with_bad_utf8() -> bytes:
    # field 1 (queue), length-delimited, 2 bytes: "q\xff" is not UTF-8.
    return b"\x0a\x02q\xff" + pb.EnqueueRequest(job_type="t").SerializeToString()


_CASES = [(method, payload) for method in ("Enqueue", "EnqueueBatch", "EnqueueAtomic", "GetServerInfo")
          for payload in (b"\xff\xff\xff\xff", b"\x0a\x05ab", _valid_prefix_with_bad_utf8())
          # GetServerInfoRequest has no fields: a string in field 1 is an unknown field, ignored.
          if not (method == "GetServerInfo" and payload.startswith(b"\x0a\x02q"))]


@pytest.mark.parametrize(("method", "payload"), _CASES)
def test_undecodable_requests_are_invalid_argument_with_error_info(shared_server: ServerProcess, method: str,
                                                                   payload: bytes) -> None:
    with grpc.insecure_channel(shared_server.grpc_target) as channel:
        call = channel.unary_unary(f"/sepp.api.v1.ProducerService/{method}")
        with pytest.raises(grpc.RpcError) as caught:
            call(payload, timeout=10)
        error = caught.value
        assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
        status = wire.status_from_metadata(error.trailing_metadata())
        assert status is not None
        info = wire.unpack_details(status)["error_info"]
        assert (info.reason, info.domain) == ("INVALID_ARGUMENT", "sepp")
        assert "malformed request" in status.message
        # …and the server still serves.
        ack = producer_pb2_grpc.ProducerServiceStub(channel).Enqueue(pb.EnqueueRequest(queue="q", job_type="t"))
        assert ack.job_id


def test_worker_calls_decode_defensively_too(shared_server: ServerProcess) -> None:
    with grpc.insecure_channel(shared_server.grpc_target) as channel:
        call = channel.unary_unary("/sepp.api.v1.WorkerService/Ack")
        with pytest.raises(grpc.RpcError) as caught:
            call(b"\x0a\x01\xff", timeout=10)
        assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
