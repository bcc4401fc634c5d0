"""Admin API, queues (SPEC §4): declare, update without restart, pause/resume, purge, delete, stats."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import grpc
import pytest
from google.protobuf import duration_pb2, field_mask_pb2
from support.admin import AdminStubs, connect
from support.failures import fails as refusal
from support.servers import backend_config

from sepp.api.v1 import admin_pb2 as apb
from sepp.api.v1 import common_pb2 as pb
from sepp.api.v1 import worker_pb2 as wpb
from sepp.testing import ServerProcess

ServerFactory = Callable[..., ServerProcess]


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory, backend: str) -> Iterator[ServerProcess]:
    """One server for the tests of this module (each uses its own queues)."""
    with ServerProcess(Path(tmp_path_factory.mktemp("admin-queues")),
                       {"sweep_interval": 0.05, "shutdown_grace": 5.0, **backend_config(backend)}) as proc:
        yield proc


@pytest.fixture
def stubs(srv: ServerProcess) -> Iterator[AdminStubs]:
    with connect(srv.grpc_target) as s:
        yield s


def test_declare_creates_then_marks_declared_and_list_get_show_it(stubs: AdminStubs) -> None:
    settings = pb.QueueSettings(default_priority=7, lease_duration=duration_pb2.Duration(seconds=9))
    resp = stubs.call("DeclareQueue", apb.DeclareQueueRequest(name="dq:a.b-c", settings=settings))
    assert resp.created is True
    assert resp.queue.declared is True
    assert resp.queue.settings.default_priority == 7
    assert resp.queue.settings.lease_duration.seconds == 9
    assert resp.queue.settings.default_max_attempts == 10  # unnamed fields keep the server defaults
    again = stubs.call("DeclareQueue", apb.DeclareQueueRequest(name="dq:a.b-c"))
    assert again.created is False
    assert again.queue.settings.default_priority == 7  # no settings: unchanged
    got = stubs.call("GetQueue", apb.GetQueueRequest(name="dq:a.b-c"))
    assert got.name == "dq:a.b-c" and got.declared
    names = [q.name for q in stubs.call("ListQueues", apb.ListQueuesRequest()).queues]
    assert "dq:a.b-c" in names and names == sorted(names)


def test_declare_refuses_a_bad_name_and_a_bad_setting_with_the_field(stubs: AdminStubs) -> None:
    bad_name = refusal(lambda: stubs.call("DeclareQueue", apb.DeclareQueueRequest(name=".hidden")))
    assert bad_name.code == grpc.StatusCode.INVALID_ARGUMENT
    assert bad_name.reason == "INVALID_ARGUMENT" and bad_name.metadata["field"] == "name"
    bad_value = refusal(lambda: stubs.call("DeclareQueue", apb.DeclareQueueRequest(
        name="dq-bad", settings=pb.QueueSettings(default_priority=12))))
    assert bad_value.code == grpc.StatusCode.INVALID_ARGUMENT
    assert bad_value.metadata["field"] == "default_priority"
    unknown_path = refusal(lambda: stubs.call("DeclareQueue", apb.DeclareQueueRequest(
        name="dq-bad", settings=pb.QueueSettings(), update_mask=field_mask_pb2.FieldMask(paths=["nope"]))))
    assert unknown_path.code == grpc.StatusCode.INVALID_ARGUMENT
    assert refusal(lambda: stubs.call("GetQueue", apb.GetQueueRequest(name="dq-bad"))).reason == "QUEUE_NOT_FOUND"


def test_unknown_queue_is_not_found_with_queue_not_found(stubs: AdminStubs) -> None:
    for method, req in (("GetQueue", apb.GetQueueRequest(name="nope")),
                        ("PauseQueue", apb.PauseQueueRequest(name="nope")),
                        ("UpdateQueue", apb.UpdateQueueRequest(name="nope", settings=pb.QueueSettings(
                            default_priority=1))),
                        ("PurgeQueue", apb.PurgeQueueRequest(queue="nope")),
                        ("DeleteQueue", apb.DeleteQueueRequest(name="nope")),
                        ("GetQueueStats", apb.GetQueueStatsRequest(queues=["nope"]))):
        r = refusal(lambda m=method, q=req: stubs.call(m, q))  # type: ignore[misc]
        assert (r.code, r.reason) == (grpc.StatusCode.NOT_FOUND, "QUEUE_NOT_FOUND"), method


def test_update_takes_effect_at_once_and_survives_a_restart(server_factory: ServerFactory) -> None:
    server = server_factory()
    with connect(server.grpc_target) as stubs:
        stubs.enqueue("up", payload=pb.Payload(data=b"x" * 100))
        info = stubs.call("UpdateQueue", apb.UpdateQueueRequest(
            name="up", settings=pb.QueueSettings(limits=pb.QueueLimits(max_payload_bytes=10)),
            update_mask=field_mask_pb2.FieldMask(paths=["limits.max_payload_bytes"])))
        assert info.settings.limits.max_payload_bytes == 10
        assert info.settings.limits.max_custom_entries == 32  # other limits untouched
        r = refusal(lambda: stubs.enqueue("up", payload=pb.Payload(data=b"x" * 11)))
        assert r.reason == "PAYLOAD_TOO_LARGE"
        # Zero needs the mask: the implied mask only takes populated fields.
        stubs.call("UpdateQueue", apb.UpdateQueueRequest(
            name="up", settings=pb.QueueSettings(default_priority=0),
            update_mask=field_mask_pb2.FieldMask(paths=["default_priority"])))
    server.restart()
    with connect(server.grpc_target) as stubs:
        got = stubs.call("GetQueue", apb.GetQueueRequest(name="up"))
        assert got.settings.limits.max_payload_bytes == 10
        assert got.settings.default_priority == 0


def test_a_paused_queue_gives_nothing_and_resume_wakes_a_waiting_reserver(stubs: AdminStubs) -> None:
    job_id = stubs.enqueue("pz")
    paused = stubs.call("PauseQueue", apb.PauseQueueRequest(name="pz"))
    assert paused.paused is True
    assert stubs.reserve("pz") == []
    got: list[wpb.Reservation] = []
    waiter = threading.Thread(target=lambda: got.extend(stubs.reserve("pz", wait=10)))
    started = time.monotonic()
    waiter.start()
    # Time for the Reserve to park in its long-poll: nothing outside the server shows a parked
    # call (the engine tests wait on ``parked()``); had it not parked yet, it would just get the job.
    time.sleep(0.3)
    assert stubs.call("ResumeQueue", apb.ResumeQueueRequest(name="pz")).paused is False
    waiter.join(15)
    assert [r.job.id for r in got] == [job_id]
    assert time.monotonic() - started < 5  # woken by the resume, not by the wait running out


def test_purge_deletes_the_backlog_by_default_and_named_states_on_request(stubs: AdminStubs) -> None:
    for _ in range(3):
        stubs.enqueue("pg")
    stubs.enqueue("pg", scheduled_at=_future(3600))
    done = stubs.reserve("pg")[0]
    stubs.worker.Ack(wpb.AckRequest(job_id=done.job.id, lease_id=done.lease_id))
    assert stubs.call("PurgeQueue", apb.PurgeQueueRequest(queue="pg")).deleted == 3  # 2 ready + 1 scheduled
    stats = stubs.call("GetQueueStats", apb.GetQueueStatsRequest(queues=["pg"])).stats[0]
    assert (stats.ready, stats.scheduled, stats.completed) == (0, 0, 1)
    assert stubs.call("PurgeQueue", apb.PurgeQueueRequest(queue="pg", states=[pb.COMPLETED])).deleted == 1


def test_delete_refuses_a_non_empty_queue_unless_forced(stubs: AdminStubs) -> None:
    stubs.enqueue("dl")
    stubs.enqueue("dl")
    cancelled = stubs.enqueue("dl")
    stubs.call("CancelJob", apb.CancelJobRequest(job_id=cancelled))
    assert stubs.call("PurgeQueue", apb.PurgeQueueRequest(queue="dl")).deleted == 2  # the plain purge leaves it
    r = refusal(lambda: stubs.call("DeleteQueue", apb.DeleteQueueRequest(name="dl")))
    assert (r.code, r.reason, r.metadata["jobs"]) == (grpc.StatusCode.FAILED_PRECONDITION, "QUEUE_NOT_EMPTY", "1")
    # The refusal names what is left and both ways out that work (new-user trial finding 3).
    assert r.message == ("queue 'dl' holds 1 job(s) (1 cancelled); delete it with force (sepp queues delete dl "
                         "--force; the API's DeleteQueueRequest.force) or purge those states first (sepp queues "
                         "purge dl --state cancelled; a purge without --state deletes only scheduled and ready jobs)")
    stubs.enqueue("dl")
    stubs.enqueue("dl")
    assert stubs.call("DeleteQueue", apb.DeleteQueueRequest(name="dl", force=True)).jobs_deleted == 3
    assert refusal(lambda: stubs.call("GetQueue", apb.GetQueueRequest(name="dl"))).reason == "QUEUE_NOT_FOUND"
    stubs.call("DeclareQueue", apb.DeclareQueueRequest(name="dl-empty"))
    assert stubs.call("DeleteQueue", apb.DeleteQueueRequest(name="dl-empty")).jobs_deleted == 0


def test_stats_count_states_age_the_oldest_ready_job_and_count_throughput(stubs: AdminStubs) -> None:
    for _ in range(4):
        stubs.enqueue("st")
    time.sleep(0.2)  # the subject: the oldest ready job's age counts this wait
    acked, dead = stubs.reserve("st", 2)
    stubs.worker.Ack(wpb.AckRequest(job_id=acked.job.id, lease_id=acked.lease_id))
    stubs.worker.Nack(wpb.NackRequest(job_id=dead.job.id, lease_id=dead.lease_id, dead_letter="x"))
    stubs.call("CancelJob", apb.CancelJobRequest(job_id=stubs.enqueue("st", scheduled_at=_future(600))))
    s = stubs.call("GetQueueStats", apb.GetQueueStatsRequest(queues=["st"])).stats[0]
    assert (s.scheduled, s.ready, s.reserved, s.completed, s.dead_lettered, s.cancelled) == (0, 2, 0, 1, 1, 1)
    assert s.oldest_ready_age.seconds * 1e9 + s.oldest_ready_age.nanos >= 0.2e9
    assert len(s.throughput) == 60
    assert 0 <= time.time() - s.throughput[-1].minute.seconds < 61  # the last entry is the current minute
    assert s.throughput[-1].minute.seconds - s.throughput[0].minute.seconds == 59 * 60
    assert sum(m.enqueued for m in s.throughput) == 5  # counted in memory, not flushed yet
    assert sum(m.completed for m in s.throughput) == 1
    assert sum(m.dead_lettered for m in s.throughput) == 1
    every = stubs.call("GetQueueStats", apb.GetQueueStatsRequest()).stats
    assert "st" in [x.queue for x in every]


def test_enqueue_counts_survive_a_restart_after_the_flush(server_factory: ServerFactory) -> None:
    server = server_factory()
    with connect(server.grpc_target) as stubs:
        for _ in range(3):
            stubs.enqueue("fl")
    server.restart()  # a graceful stop flushes the in-memory counts
    with connect(server.grpc_target) as stubs:
        s = stubs.call("GetQueueStats", apb.GetQueueStatsRequest(queues=["fl"])).stats[0]
        assert sum(m.enqueued for m in s.throughput) == 3


def _future(seconds: float) -> object:
    from google.protobuf import timestamp_pb2

    t = timestamp_pb2.Timestamp()
    t.FromNanoseconds(time.time_ns() + int(seconds * 1e9))
    return t
