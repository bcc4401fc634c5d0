"""Out-of-range worker arguments are refused per item with INVALID_ARGUMENT, never UNKNOWN,
and oversized texts are cut (SPEC §3: error detail ≤ 16 KiB). ``StopReserving`` over the
wire: it needs a worker_id and ends that worker's long-poll."""

from __future__ import annotations

import time
import uuid

import grpc
import pytest
from google.protobuf import duration_pb2
from support.failures import fails
from support.waiting import wait_for

from sepp import wire
from sepp.api.v1 import common_pb2 as pb
from sepp.api.v1 import producer_pb2_grpc, worker_pb2_grpc
from sepp.api.v1 import worker_pb2 as wpb
from sepp.testing import ServerProcess

HUGE = duration_pb2.Duration(seconds=2**40)


def _reserved(channel: grpc.Channel, n: int, queue: str) -> list[wpb.Reservation]:
    """Enqueue ``n`` jobs on ``queue`` (one of the test's own: the server is shared) and reserve them."""
    producer = producer_pb2_grpc.ProducerServiceStub(channel)
    for _ in range(n):
        producer.Enqueue(pb.EnqueueRequest(queue=queue, job_type="t"))
    worker = worker_pb2_grpc.WorkerServiceStub(channel)
    return list(worker.Reserve(wpb.ReserveRequest(queues=[queue], max_jobs=n, worker_id="w")).reservations)


def _reason(error: grpc.RpcError) -> str:
    status = wire.status_from_metadata(error.trailing_metadata())
    assert status is not None
    return str(wire.unpack_details(status)["error_info"].reason)


def test_a_huge_retry_after_is_refused_per_item_and_the_rest_of_the_settle_applies(
        shared_server: ServerProcess) -> None:
    with grpc.insecure_channel(shared_server.grpc_target) as channel:
        a, b = _reserved(channel, 2, "lim-retry")
        worker = worker_pb2_grpc.WorkerServiceStub(channel)
        results = worker.Settle(wpb.SettleRequest(items=[
            wpb.SettleItem(ack=wpb.AckRequest(job_id=a.job.id, lease_id=a.lease_id)),
            wpb.SettleItem(nack=wpb.NackRequest(job_id=b.job.id, lease_id=b.lease_id, retry_after=HUGE)),
        ])).results
        assert [r.ok for r in results] == [True, False]
        assert results[1].error_reason == "INVALID_ARGUMENT"
        with pytest.raises(grpc.RpcError) as caught:
            worker.Nack(wpb.NackRequest(job_id=b.job.id, lease_id=b.lease_id, retry_after=HUGE))
        assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT and _reason(caught.value) == "INVALID_ARGUMENT"
        # The largest accepted delay is the schedule horizon (365 days).
        ok = worker.Nack(wpb.NackRequest(job_id=b.job.id, lease_id=b.lease_id,
                                         retry_after=duration_pb2.Duration(seconds=365 * 86400)))
        assert ok.state == pb.SCHEDULED


@pytest.mark.parametrize("seconds, nanos, accepted", [(86_400, 0, True), (86_401, 0, False), (2**40, 0, False),
                                                     (0, 1_000_000, True), (0, 999_999, False), (0, 1, False)])
def test_lease_lengths_are_bounded_from_a_millisecond_to_a_day(shared_server: ServerProcess, seconds: int, nanos: int,
                                                               accepted: bool) -> None:
    """A lease (or extension) under 1 ms would be over before the worker got it: refused."""
    length = duration_pb2.Duration(seconds=seconds, nanos=nanos)
    with grpc.insecure_channel(shared_server.grpc_target) as channel:
        queue = f"lim-{seconds}-{nanos}"
        (r,) = _reserved(channel, 1, queue)
        worker = worker_pb2_grpc.WorkerServiceStub(channel)
        extend = wpb.ExtendLeaseRequest(job_id=r.job.id, lease_id=r.lease_id, extend_by=length)
        reserve = wpb.ReserveRequest(queues=[queue], max_jobs=1, lease_duration=length)
        if accepted:
            assert worker.ExtendLease(extend).lease_expires_at.seconds > 0
            worker.Reserve(reserve)
            return
        for call, request in ((worker.ExtendLease, extend), (worker.Reserve, reserve)):
            with pytest.raises(grpc.RpcError) as caught:
                call(request)
            assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT


def test_reason_and_message_are_cut_to_their_limits(shared_server: ServerProcess) -> None:
    from sepp.api.v1 import admin_pb2 as apb
    from sepp.api.v1 import admin_pb2_grpc

    with grpc.insecure_channel(shared_server.grpc_target) as channel:
        (r,) = _reserved(channel, 1, "lim-cut")
        worker = worker_pb2_grpc.WorkerServiceStub(channel)
        worker.Nack(wpb.NackRequest(job_id=r.job.id, lease_id=r.lease_id, dead_letter="R" * 100_000,
                                    error=wpb.JobError(message="M" * 100_000, detail="D" * 100_000)))
        job = admin_pb2_grpc.AdminServiceStub(channel).GetJob(apb.GetJobRequest(job_id=r.job.id))
        assert job.dead_letter_reason == "NACK_DEAD_LETTER: " + "R" * 1024
        assert len(job.attempts[-1].error_message) == 16 * 1024
        assert len(job.attempts[-1].error_detail) == 16 * 1024


def test_stop_reserving_needs_a_worker_id_and_ends_only_that_workers_long_poll(shared_server: ServerProcess) -> None:
    with grpc.insecure_channel(shared_server.grpc_target) as channel:
        worker = worker_pb2_grpc.WorkerServiceStub(channel)
        refused = fails(worker.StopReserving, wpb.StopReservingRequest(), timeout=10)
        assert (refused.code, refused.reason) == (grpc.StatusCode.INVALID_ARGUMENT, "INVALID_ARGUMENT")
        assert refused.metadata["field"] == "worker_id"
        (taken,) = _reserved(channel, 1, "lim-stop")  # the queue exists, and is empty now
        me, other = f"stop-{uuid.uuid4().hex[:8]}", f"other-{uuid.uuid4().hex[:8]}"
        long_poll = duration_pb2.Duration(seconds=20)
        parked = worker.Reserve.future(wpb.ReserveRequest(queues=["lim-stop"], max_jobs=1, worker_id=me,
                                                          wait=long_poll), timeout=30)
        others = worker.Reserve.future(wpb.ReserveRequest(queues=["lim-stop"], max_jobs=1, worker_id=other,
                                                          wait=long_poll), timeout=30)
        t0 = time.monotonic()
        # Repeated until the Reserve has reached the server, as the Worker runtime does.
        assert wait_for(lambda: worker.StopReserving(wpb.StopReservingRequest(worker_id=me), timeout=10).woken,
                        what="StopReserving to find the parked Reserve") == 1
        assert list(parked.result(timeout=10).reservations) == []
        assert time.monotonic() - t0 < 10  # well before its 20 s wait
        assert worker.StopReserving(wpb.StopReservingRequest(worker_id=me), timeout=10).woken == 0
        assert not others.done()  # another worker's long-poll goes on
        others.cancel()
        worker.Ack(wpb.AckRequest(job_id=taken.job.id, lease_id=taken.lease_id), timeout=10)
