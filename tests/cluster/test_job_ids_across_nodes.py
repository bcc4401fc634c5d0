"""Job ids that carry their seq (docs/decisions.md "PostgreSQL: job ids carry their seq"),
end to end: two real ``sepp serve --storage postgres`` nodes on one schema take turns and
race enqueuing (single, batch, atomic, keyed) over gRPC; every id answered is distinct and
every job is found, searched, cancelled, requeued, leased, acked and deleted by id through
the other node. Ids of the wrong shape are refused or not found, never INTERNAL."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import grpc
import pytest
from support.producer import connect, job

from sepp.api.v1 import admin_pb2 as apb
from sepp.api.v1 import worker_pb2 as wpb
from sepp.testing import ServerProcess


def test_jobs_enqueued_through_either_node_are_found_and_handled_by_id_through_the_other(
        cluster_factory: object) -> None:
    nodes: list[ServerProcess] = cluster_factory(n=2, limits={"max_enqueue_batch": 2000})  # type: ignore[operator]

    def produce(i: int) -> list[str]:
        with connect(nodes[i % 2].grpc_target) as s:
            ids = [s.enqueue(job("ids", data=b"x")).job_id for _ in range(5)]
            ids += [r.ack.job_id for r in s.batch([job("ids", data=b"y") for _ in range(700)])]
            ids += [a.job_id for a in s.atomic([job("ids", data=b"z") for _ in range(40)])]
            ids += [s.enqueue(job("ids", key=f"k{n}")).job_id for n in range(5)]
            return ids

    with ThreadPoolExecutor(4) as pool:
        answers = list(pool.map(produce, range(4)))
    keyed = [a[-5:] for a in answers]
    for n in range(5):
        assert len({k[n] for k in keyed}) == 1  # one job per key across both nodes
    every = {j for a in answers for j in a}
    assert len(every) == 4 * 745 + 5
    by_node = [set().union(*answers[i::2]) for i in range(2)]
    with connect(nodes[0].grpc_target) as a, connect(nodes[1].grpc_target) as b:
        for mine, other in ((by_node[0], b), (by_node[1], a)):
            for job_id in sorted(mine)[::97]:
                got = other.admin.GetJob(apb.GetJobRequest(job_id=job_id), timeout=10)
                assert got.id == job_id
                page = other.admin.ListJobs(apb.ListJobsRequest(job_id=job_id), timeout=10)
                assert [j.job.id for j in page.jobs] == [job_id]
        target = sorted(by_node[0])[1]
        assert b.admin.CancelJob(apb.CancelJobRequest(job_id=target, reason="stop"), timeout=10).id == target
        assert b.admin.RequeueJob(apb.RequeueJobRequest(job_id=target), timeout=10).id == target
        b.admin.DeleteJob(apb.DeleteJobRequest(job_id=target), timeout=10)
        with pytest.raises(grpc.RpcError) as gone:
            a.admin.GetJob(apb.GetJobRequest(job_id=target), timeout=10)
        assert gone.value.code() == grpc.StatusCode.NOT_FOUND
        # Lease through one node, ack through the other.
        res = a.reserve(["ids"], max_jobs=256)
        assert len(res) == 256
        for r in res:
            b.worker.Ack(wpb.AckRequest(job_id=r.job.id, lease_id=r.lease_id), timeout=10)
        for bad in ("", "00000000-0000-0000-0000-000000000000", "ffffffff-ffff-ffff-ffff-ffffffffffff",
                    "not-an-id", target[:-1]):
            with pytest.raises(grpc.RpcError) as err:
                b.admin.GetJob(apb.GetJobRequest(job_id=bad), timeout=10)
            assert err.value.code() in (grpc.StatusCode.NOT_FOUND, grpc.StatusCode.INVALID_ARGUMENT), bad
