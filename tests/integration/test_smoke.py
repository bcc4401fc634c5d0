"""The server starts, answers health checks and stores a job."""

from __future__ import annotations

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from sepp.api.v1 import common_pb2 as pb
from sepp.api.v1 import producer_pb2_grpc
from sepp.testing import ServerProcess


def test_health_reports_serving_and_enqueue_returns_a_uuid(server: ServerProcess) -> None:
    with grpc.insecure_channel(server.grpc_target) as channel:
        health = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest())
        assert health.status == health_pb2.HealthCheckResponse.SERVING
        ack = producer_pb2_grpc.ProducerServiceStub(channel).Enqueue(pb.EnqueueRequest(queue="q", job_type="t"))
        assert len(ack.job_id) == 36 and ack.job_id[14] == "7"
        assert ack.deduplicated is False
