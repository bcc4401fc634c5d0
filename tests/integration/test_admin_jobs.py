"""Admin API, jobs (SPEC §4, §6): get, keyset listings, key lookup, cancel, redrive, delete."""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from google.protobuf import duration_pb2, timestamp_pb2
from support.admin import AdminStubs, connect, list_all
from support.failures import fails as refusal
from support.servers import backend_config
from support.waiting import wait_for

from sepp.api.v1 import admin_pb2 as apb
from sepp.api.v1 import common_pb2 as pb
from sepp.api.v1 import worker_pb2 as wpb
from sepp.testing import ServerProcess


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory, backend: str) -> Iterator[ServerProcess]:
    """One server for this module; every test uses its own queues."""
    with ServerProcess(Path(tmp_path_factory.mktemp("admin-jobs")),
                       {"sweep_interval": 0.05, "shutdown_grace": 5.0, **backend_config(backend)}) as proc:
        yield proc


@pytest.fixture
def stubs(srv: ServerProcess) -> Iterator[AdminStubs]:
    with connect(srv.grpc_target) as s:
        yield s


def _ts(seconds_from_now: float) -> timestamp_pb2.Timestamp:
    t = timestamp_pb2.Timestamp()
    t.FromNanoseconds(time.time_ns() + int(seconds_from_now * 1e9))
    return t


def test_get_job_returns_every_field_and_unknown_or_malformed_ids_are_refused(stubs: AdminStubs) -> None:
    job_id = stubs.enqueue("gj", "send", payload=pb.Payload(data=b'{"a": 1}', encoding="application/json"),
                           custom={"n": pb.CustomValue(int_value=2**62), "ok": pb.CustomValue(bool_value=True)},
                           priority=8, max_attempts=3, idempotency_key="k-1",
                           trace_context={"traceparent": "00-" + "a" * 32 + "-" + "b" * 16 + "-01"})
    job = stubs.call("GetJob", apb.GetJobRequest(job_id=job_id))
    assert (job.id, job.queue, job.job_type, job.state) == (job_id, "gj", "send", pb.READY)
    assert job.payload.data == b'{"a": 1}' and job.payload.encoding == "application/json"
    assert job.custom["n"].int_value == 2**62 and job.custom["ok"].bool_value is True
    assert (job.priority, job.max_attempts, job.attempt, job.idempotency_key) == (8, 3, 0, "k-1")
    assert job.trace_context["traceparent"].startswith("00-aaa")
    missing = refusal(lambda: stubs.call("GetJob", apb.GetJobRequest(job_id="01900000-0000-7000-8000-000000000000")))
    assert (missing.code, missing.reason) == (grpc.StatusCode.NOT_FOUND, "JOB_NOT_FOUND")
    bad = refusal(lambda: stubs.call("GetJob", apb.GetJobRequest(job_id="not-a-uuid")))
    assert (bad.code, bad.metadata["field"]) == (grpc.StatusCode.INVALID_ARGUMENT, "job_id")


def test_ready_listing_follows_reserve_order_across_pages(stubs: AdminStubs) -> None:
    ids = {p: [stubs.enqueue("lo", priority=p) for _ in range(3)] for p in (2, 9, 5)}
    listed = list_all(stubs, page_size=2, queue="lo", state=pb.READY)
    assert [s.job.id for s in listed] == ids[9] + ids[5] + ids[2]
    assert all(s.payload_bytes == 0 and not s.job.payload.data for s in listed)


def test_a_job_that_keeps_its_state_is_listed_exactly_once_while_jobs_are_enqueued(stubs: AdminStubs) -> None:
    rng = random.Random(7)
    before = {stubs.enqueue("pag", priority=rng.randrange(10)) for _ in range(120)}
    stop = threading.Event()

    def producer() -> None:
        while not stop.is_set():
            stubs.producer.Enqueue(pb.EnqueueRequest(queue="pag", job_type="t", priority=rng.randrange(10)))

    threads = [threading.Thread(target=producer) for _ in range(2)]
    for t in threads:
        t.start()
    try:
        seen: list[str] = []
        token = ""
        while True:
            page = stubs.call("ListJobs", apb.ListJobsRequest(queue="pag", state=pb.READY, page_size=7,
                                                               page_token=token))
            seen.extend(s.job.id for s in page.jobs)
            token = page.next_page_token
            time.sleep(0.005)  # let the producers interleave with the paging
            if not token:
                break
        any_state = [s.job.id for s in list_all(stubs, page_size=9, queue="pag")]
    finally:
        stop.set()
        for t in threads:
            t.join()
    assert len(seen) == len(set(seen)), "a job was listed twice"
    assert before <= set(seen), "a job that stayed READY was skipped"
    assert len(any_state) == len(set(any_state)) and before <= set(any_state)


def test_finished_listings_are_newest_first_and_filter_by_type_and_reason(stubs: AdminStubs) -> None:
    a = stubs.dead_letter("fin", "alpha", reason="bad input")
    b = stubs.dead_letter("fin", "beta", reason="gone")
    c = stubs.dead_letter("fin", "alpha", reason="bad input")
    listed = list_all(stubs, page_size=1, queue="fin", state=pb.DEAD_LETTERED)
    assert [s.job.id for s in listed] == [c, b, a]
    assert listed[0].last_error == "it broke" and listed[0].attempts_recorded == 1
    assert listed[0].job.dead_letter_reason == "NACK_DEAD_LETTER: bad input"
    alphas = list_all(stubs, queue="fin", state=pb.DEAD_LETTERED, job_type="alpha")
    assert [s.job.id for s in alphas] == [c, a]
    gone = list_all(stubs, queue="fin", state=pb.DEAD_LETTERED, reason_prefix="NACK_DEAD_LETTER: gone")
    assert [s.job.id for s in gone] == [b]
    # Across queues: every queue's dead letters, queue by queue.
    other = stubs.dead_letter("fin2")
    across = [s.job.id for s in list_all(stubs, page_size=2, state=pb.DEAD_LETTERED)]
    assert across.index(c) < across.index(other)
    assert {a, b, c, other} <= set(across)


def test_a_page_token_only_works_with_the_filters_it_was_issued_for(stubs: AdminStubs) -> None:
    for _ in range(3):
        stubs.enqueue("tok")
    page = stubs.call("ListJobs", apb.ListJobsRequest(queue="tok", state=pb.READY, page_size=1))
    assert page.next_page_token
    other = refusal(lambda: stubs.call("ListJobs", apb.ListJobsRequest(
        queue="tok", state=pb.SCHEDULED, page_size=1, page_token=page.next_page_token)))
    assert (other.code, other.metadata["field"]) == (grpc.StatusCode.INVALID_ARGUMENT, "page_token")
    junk = refusal(lambda: stubs.call("ListJobs", apb.ListJobsRequest(queue="tok", page_token="%%%")))
    assert junk.code == grpc.StatusCode.INVALID_ARGUMENT


def test_find_by_idempotency_key_points_at_the_job_even_after_it_is_deleted(stubs: AdminStubs) -> None:
    job_id = stubs.enqueue("idem", idempotency_key="order-42")
    found = stubs.call("FindJobByIdempotencyKey", apb.FindJobByIdempotencyKeyRequest(queue="idem", key="order-42"))
    assert found.job_id == job_id and found.job.id == job_id
    assert found.key_expires_at.seconds > time.time() + 23 * 3600
    stubs.call("DeleteJob", apb.DeleteJobRequest(job_id=job_id))
    after = stubs.call("FindJobByIdempotencyKey", apb.FindJobByIdempotencyKeyRequest(queue="idem", key="order-42"))
    assert after.job_id == job_id and not after.HasField("job")
    none = refusal(lambda: stubs.call("FindJobByIdempotencyKey",
                                      apb.FindJobByIdempotencyKeyRequest(queue="idem", key="other")))
    assert none.reason == "IDEMPOTENCY_KEY_NOT_FOUND"


def test_cancel_ready_and_scheduled_jobs_at_once(stubs: AdminStubs) -> None:
    ready = stubs.enqueue("cx")
    later = stubs.enqueue("cx", scheduled_at=_ts(600))
    job = stubs.call("CancelJob", apb.CancelJobRequest(job_id=ready, reason="not needed"))
    assert job.state == pb.CANCELLED and job.dead_letter_reason == "not needed"
    assert job.HasField("finished_at")
    assert stubs.call("CancelJob", apb.CancelJobRequest(job_id=later)).state == pb.CANCELLED
    assert stubs.call("CancelJob", apb.CancelJobRequest(job_id=ready)).state == pb.CANCELLED  # no-op again
    assert stubs.reserve("cx") == []


def test_cancel_of_a_reserved_job_is_reported_through_extend_lease(stubs: AdminStubs) -> None:
    job_id = stubs.enqueue("cr")
    r = stubs.reserve_job("cr", job_id)
    job = stubs.call("CancelJob", apb.CancelJobRequest(job_id=job_id))
    assert job.state == pb.RESERVED and job.cancel_requested is True
    ext = stubs.worker.ExtendLease(wpb.ExtendLeaseRequest(job_id=job_id, lease_id=r.lease_id,
                                                          extend_by=duration_pb2.Duration(seconds=30)))
    assert ext.cancel_requested is True
    stubs.worker.Ack(wpb.AckRequest(job_id=job_id, lease_id=r.lease_id))
    done = refusal(lambda: stubs.call("CancelJob", apb.CancelJobRequest(job_id=job_id)))
    assert (done.code, done.reason, done.metadata["state"]) == (grpc.StatusCode.FAILED_PRECONDITION, "JOB_STATE",
                                                                "COMPLETED")


@pytest.mark.parametrize("directive", ["retry", "release"])
def test_a_reserved_job_asked_to_cancel_is_cancelled_when_the_worker_gives_it_back(stubs: AdminStubs,
                                                                                  directive: str) -> None:
    queue = f"cancel-{directive}"
    job_id = stubs.enqueue(queue)
    r = stubs.reserve_job(queue, job_id)
    stubs.call("CancelJob", apb.CancelJobRequest(job_id=job_id))
    nack = wpb.NackRequest(job_id=job_id, lease_id=r.lease_id)
    getattr(nack, directive).SetInParent()
    assert stubs.worker.Nack(nack).state == pb.CANCELLED
    job = stubs.call("GetJob", apb.GetJobRequest(job_id=job_id))
    assert job.state == pb.CANCELLED and "cancelled" in job.dead_letter_reason
    assert stubs.reserve(queue) == []


def test_requeue_keeps_the_job_and_its_history_and_resets_the_attempt(stubs: AdminStubs) -> None:
    job_id = stubs.dead_letter("rq", "work", payload=pb.Payload(data=b"\x00\x01", encoding="bin"),
                               custom={"k": pb.CustomValue(float_value=1.5)}, priority=3, max_attempts=4,
                               trace_context={"tracestate": "v=1"})
    dead = stubs.call("GetJob", apb.GetJobRequest(job_id=job_id))
    assert (dead.state, dead.attempt, len(dead.attempts)) == (pb.DEAD_LETTERED, 1, 1)
    job = stubs.call("RequeueJob", apb.RequeueJobRequest(job_id=job_id))
    assert (job.id, job.state, job.attempt) == (job_id, pb.READY, 0)
    assert job.payload == dead.payload and job.custom == dead.custom and job.trace_context == dead.trace_context
    assert (job.priority, job.max_attempts, job.job_type) == (3, 4, "work")
    assert list(job.attempts) == list(dead.attempts)
    assert not job.dead_letter_reason and not job.HasField("finished_at")
    again = stubs.reserve_job("rq", job_id)
    assert again.attempt == 1
    stubs.worker.Ack(wpb.AckRequest(job_id=job_id, lease_id=again.lease_id))
    history = stubs.call("GetJob", apb.GetJobRequest(job_id=job_id)).attempts
    assert [a.outcome for a in history] == ["dead_letter", "completed"]
    ready = refusal(lambda: stubs.call("RequeueJob", apb.RequeueJobRequest(job_id=job_id)))
    assert (ready.reason, ready.metadata["state"]) == ("JOB_STATE", "COMPLETED")


def test_a_cancelled_job_can_be_requeued(stubs: AdminStubs) -> None:
    job_id = stubs.enqueue("rqc")
    stubs.call("CancelJob", apb.CancelJobRequest(job_id=job_id))
    assert stubs.call("RequeueJob", apb.RequeueJobRequest(job_id=job_id)).state == pb.READY
    assert [r.job.id for r in stubs.reserve("rqc")] == [job_id]


def test_bulk_redrive_counts_first_then_requeues_what_matches(stubs: AdminStubs) -> None:
    a1 = stubs.dead_letter("bulk", "a", reason="x")
    a2 = stubs.dead_letter("bulk", "a", reason="y")
    b1 = stubs.dead_letter("bulk", "b", reason="x")
    mark = _ts(0)
    wait_for(lambda: time.time_ns() > mark.ToNanoseconds(), what="the clock past the mark")  # a3 is stamped after it
    a3 = stubs.dead_letter("bulk", "a", reason="x")
    other = stubs.dead_letter("bulk-other", "a", reason="x")

    def redrive(dry_run: bool, max_jobs: int = 0, **f: object) -> tuple[int, int]:
        resp = stubs.call("RequeueDeadLettered", apb.RequeueDeadLetteredRequest(
            filter=apb.DeadLetterFilter(**f), dry_run=dry_run, max_jobs=max_jobs))  # type: ignore[arg-type]
        return resp.matched, resp.requeued

    assert redrive(True, queue="bulk") == (4, 0)
    assert redrive(True, queue="bulk", job_type="a") == (3, 0)
    assert redrive(True, queue="bulk", reason_prefix="NACK_DEAD_LETTER: x") == (3, 0)
    assert redrive(True, queue="bulk", dead_lettered_before=mark) == (3, 0)
    assert redrive(True, job_type="a", dead_lettered_after=mark) == (2, 0)  # a3 and other, any queue
    assert redrive(False, max_jobs=1, queue="bulk", job_type="a", dead_lettered_before=mark) == (2, 1)
    assert redrive(False, queue="bulk", job_type="a") == (2, 2)
    states = {i: stubs.call("GetJob", apb.GetJobRequest(job_id=i)) for i in (a1, a2, a3, b1, other)}
    assert all(states[i].state == pb.READY and states[i].attempt == 0 for i in (a1, a2, a3))
    assert states[b1].state == pb.DEAD_LETTERED and states[other].state == pb.DEAD_LETTERED


def test_delete_removes_a_job_in_any_state(stubs: AdminStubs) -> None:
    job_id = stubs.enqueue("del")
    stubs.reserve_job("del", job_id)
    stubs.call("DeleteJob", apb.DeleteJobRequest(job_id=job_id))
    assert refusal(lambda: stubs.call("GetJob", apb.GetJobRequest(job_id=job_id))).reason == "JOB_NOT_FOUND"
    assert refusal(lambda: stubs.call("DeleteJob", apb.DeleteJobRequest(job_id=job_id))).reason == "JOB_NOT_FOUND"
