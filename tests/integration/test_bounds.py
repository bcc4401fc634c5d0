"""Every duration, timestamp and count is bounded at the edge, and
a stored out-of-range setting never makes a read fail.

Each bound that once let a value through at its limit and one past it, through
the public admin client (``sepp.client.admin``) and raw stubs of a real ``sepp serve``.
Limits: ``sepp.limits`` and docs/configuration.md ("Maxima").
"""

from __future__ import annotations

import json
import sqlite3
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.protobuf import duration_pb2, timestamp_pb2
from support.admin import AdminStubs, connect
from support.failures import fails as refusal
from support.producer import duration
from support.servers import backend_config

from sepp import Client, EnqueueRequest
from sepp.api.v1 import admin_pb2 as apb
from sepp.api.v1 import common_pb2 as pb
from sepp.api.v1 import producer_pb2 as ppb
from sepp.api.v1 import worker_pb2 as wpb
from sepp.client.admin import AdminClient, AdminError
from sepp.limits import MAX_BACKOFF, MAX_RETENTION, MAX_TIMESTAMP_SECONDS, MIN_TIMESTAMP_SECONDS
from sepp.testing import ServerProcess

ServerFactory = Callable[..., ServerProcess]

TEN_YEARS = int(MAX_RETENTION)  # 315,360,000 s
YEAR = int(MAX_BACKOFF)  # 31,536,000 s
NS = 1_000_000_000


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory, backend: str) -> Iterator[ServerProcess]:
    """One server for the tests of this module (each uses its own queues)."""
    with ServerProcess(Path(tmp_path_factory.mktemp("bounds")), {"sweep_interval": 0.05, "shutdown_grace": 5.0,
                                                                  **backend_config(backend)}) as proc:
        yield proc


@pytest.fixture
def stubs(srv: ServerProcess) -> Iterator[AdminStubs]:
    with connect(srv.grpc_target) as s:
        yield s


@pytest.fixture
def admin(srv: ServerProcess) -> Iterator[AdminClient]:
    with AdminClient(srv.grpc_target) as client:
        yield client


def _refused(call: Callable[[], Any]) -> AdminError:
    with pytest.raises(AdminError) as caught:
        call()
    return caught.value


def _one(name: str, value: duration_pb2.Duration) -> pb.QueueSettings:
    """QueueSettings with only the duration ``name`` set."""
    settings = pb.QueueSettings()
    getattr(settings, name).CopyFrom(value)
    return settings


def _not_stored(admin: AdminClient, name: str) -> None:
    err = _refused(lambda: admin.get_queue(name))
    assert (err.code, err.reason) == (grpc.StatusCode.NOT_FOUND, "QUEUE_NOT_FOUND")
    assert name not in [q.name for q in admin.list_queues()]


def _reads_work(srv: ServerProcess) -> None:
    """GetServerInfo, ListQueues and a default Client.enqueue (which fetches server info first)."""
    with connect(srv.grpc_target) as s:
        assert s.producer.GetServerInfo(ppb.GetServerInfoRequest(), timeout=10).version
        s.call("ListQueues", apb.ListQueuesRequest())
    with Client(srv.grpc_target) as client:
        assert client.enqueue(EnqueueRequest("bounds-after", "t")).job_id


# ---------------------------------------------------------------- reproduction 1


def test_repro_1_a_huge_dedup_window_is_refused_not_stored_and_producers_keep_working(
        srv: ServerProcess, admin: AdminClient) -> None:
    err = _refused(lambda: admin.declare_queue(
        "archive", pb.QueueSettings(dedup_window=duration_pb2.Duration(seconds=2**63 - 1)), ["dedup_window"]))
    assert (err.code, err.reason) == (grpc.StatusCode.INVALID_ARGUMENT, "INVALID_ARGUMENT")
    assert err.metadata == {"field": "dedup_window", "limit": str(TEN_YEARS), "actual": str(2**63 - 1)}
    _not_stored(admin, "archive")
    _reads_work(srv)


# ---------------------------------------------------------------- each bound: at the limit, one past it

#: (setting, its largest accepted value in seconds).
UPPER = [("dedup_window", TEN_YEARS), ("completed_retention", TEN_YEARS), ("dead_letter_retention", TEN_YEARS),
         ("retry_base", YEAR), ("retry_cap", YEAR), ("lease_duration", 86_400)]


@pytest.mark.parametrize(("name", "limit"), UPPER, ids=[u[0] for u in UPPER])
def test_each_duration_setting_is_accepted_at_its_limit_and_refused_one_past_it(
        srv: ServerProcess, admin: AdminClient, name: str, limit: int) -> None:
    queue = f"lim-{name}"
    at, _ = admin.declare_queue(queue, _one(name, duration_pb2.Duration(seconds=limit)), [name])
    assert getattr(at.settings, name).seconds == limit
    for past in (duration_pb2.Duration(seconds=limit + 1), duration_pb2.Duration(seconds=limit, nanos=1)):
        err = _refused(lambda p=past: admin.update_queue(queue, _one(name, p), [name]))  # type: ignore[misc]
        assert (err.code, err.reason) == (grpc.StatusCode.INVALID_ARGUMENT, "INVALID_ARGUMENT")
        shown = str(limit + 1) if past.nanos == 0 else f"{limit}.000000001"
        assert err.metadata == {"field": name, "limit": str(limit), "actual": shown}
        assert str(limit) in err.message and shown in err.message
    assert getattr(admin.get_queue(queue).settings, name).seconds == limit, "a refused update changes nothing"
    fresh = f"{queue}-past"
    _refused(lambda: admin.declare_queue(fresh, _one(name, duration_pb2.Duration(seconds=limit + 1)),
                                         [name]))
    _not_stored(admin, fresh)


def test_the_lower_bounds_too(admin: AdminClient) -> None:
    """A queue lease runs from 1 ms; a negative window or retention is refused."""
    ok, _ = admin.declare_queue("lim-low", pb.QueueSettings(lease_duration=duration(0.001)), ["lease_duration"])
    assert ok.settings.lease_duration.nanos == 1_000_000
    err = _refused(lambda: admin.update_queue("lim-low", pb.QueueSettings(lease_duration=duration(0.000999)),
                                              ["lease_duration"]))
    assert err.metadata == {"field": "lease_duration", "limit": "0.001", "actual": "0.000999"}
    err = _refused(lambda: admin.update_queue("lim-low", pb.QueueSettings(
        dead_letter_retention=duration_pb2.Duration(seconds=-1)), ["dead_letter_retention"]))
    assert err.metadata == {"field": "dead_letter_retention", "limit": "0", "actual": "-1"}


def test_scalar_and_count_settings_name_field_limit_and_value(admin: AdminClient) -> None:
    cases = [(pb.QueueSettings(default_max_attempts=1_000_001), "default_max_attempts",
              {"field": "default_max_attempts", "limit": "1000000", "actual": "1000001"}),
             (pb.QueueSettings(retry_jitter=1.5), "retry_jitter",
              {"field": "retry_jitter", "limit": "1", "actual": "1.5"}),
             (pb.QueueSettings(limits=pb.QueueLimits(max_custom_entries=2**31)), "limits.max_custom_entries",
              {"field": "limits.max_custom_entries", "limit": str(2**31 - 1), "actual": str(2**31)})]
    for settings, path, meta in cases:
        err = _refused(lambda s=settings, p=path: admin.declare_queue("lim-scalar", s, [p]))  # type: ignore[misc]
        assert (err.code, err.reason, err.metadata) == (grpc.StatusCode.INVALID_ARGUMENT, "INVALID_ARGUMENT", meta)
    nan = _refused(lambda: admin.declare_queue("lim-scalar", pb.QueueSettings(retry_jitter=float("nan")),
                                               ["retry_jitter"]))
    assert nan.metadata["field"] == "retry_jitter" and nan.code == grpc.StatusCode.INVALID_ARGUMENT
    _not_stored(admin, "lim-scalar")
    at, _ = admin.declare_queue("lim-scalar", pb.QueueSettings(default_max_attempts=1_000_000),
                             ["default_max_attempts"])
    assert at.settings.default_max_attempts == 1_000_000


def test_malformed_durations_in_settings_are_refused_with_the_nanos_field(admin: AdminClient) -> None:
    for d, meta in ((duration_pb2.Duration(seconds=1, nanos=1_000_000_000),
                     {"field": "dedup_window.nanos", "limit": "999999999", "actual": "1000000000"}),
                    (duration_pb2.Duration(seconds=5, nanos=-1),
                     {"field": "dedup_window.nanos", "limit": "0", "actual": "-1"})):
        err = _refused(lambda v=d: admin.declare_queue("lim-nanos", pb.QueueSettings(dedup_window=v),  # type: ignore[misc]
                                                       ["dedup_window"]))
        assert (err.code, err.metadata) == (grpc.StatusCode.INVALID_ARGUMENT, meta)
    _not_stored(admin, "lim-nanos")


# ---------------------------------------------------------------- reproduction 2


REPRO_2 = ["dedup_window", "completed_retention", "retry_base", "retry_cap", "dead_letter_retention"]


@pytest.mark.parametrize("name", REPRO_2)
def test_repro_2_ten_to_the_thirteen_seconds_is_refused(admin: AdminClient, srv: ServerProcess, name: str) -> None:
    err = _refused(lambda: admin.declare_queue(f"r2-{name}", _one(
        name, duration_pb2.Duration(seconds=10**13)), [name]))
    assert (err.code, err.reason) == (grpc.StatusCode.INVALID_ARGUMENT, "INVALID_ARGUMENT")
    assert err.metadata["field"] == name and err.metadata["actual"] == str(10**13)
    _not_stored(admin, f"r2-{name}")


def test_repro_2_at_the_limits_every_operation_still_works(admin: AdminClient, stubs: AdminStubs) -> None:
    """The largest accepted windows and backoffs do not overflow the µs arithmetic: keyed
    enqueue (dedup), ack (completed retention), nack retry (backoff), dead-lettering."""
    settings = pb.QueueSettings(dedup_window=duration_pb2.Duration(seconds=TEN_YEARS),
                                completed_retention=duration_pb2.Duration(seconds=TEN_YEARS),
                                dead_letter_retention=duration_pb2.Duration(seconds=TEN_YEARS),
                                retry_base=duration_pb2.Duration(seconds=YEAR),
                                retry_cap=duration_pb2.Duration(seconds=YEAR), default_max_attempts=2)
    admin.declare_queue("r2-max", settings)
    first = stubs.producer.Enqueue(pb.EnqueueRequest(queue="r2-max", job_type="t", idempotency_key="k"))
    again = stubs.producer.Enqueue(pb.EnqueueRequest(queue="r2-max", job_type="t", idempotency_key="k"))
    assert again.deduplicated and again.job_id == first.job_id
    found = admin.find_job_by_key("r2-max", "k")
    assert found.key_expires_at.seconds > time.time() + TEN_YEARS - 60
    r = stubs.reserve_job("r2-max", first.job_id)
    stubs.worker.Ack(wpb.AckRequest(job_id=r.job.id, lease_id=r.lease_id))
    assert admin.get_job(first.job_id).state == pb.COMPLETED
    second = stubs.enqueue("r2-max")
    r = stubs.reserve_job("r2-max", second)
    nacked = stubs.worker.Nack(wpb.NackRequest(job_id=second, lease_id=r.lease_id, retry=wpb.RetryDirective()))
    assert nacked.state == pb.SCHEDULED
    assert nacked.run_at.seconds > time.time() + YEAR * 0.79, "backoff = base (365 d) ± 20 % jitter"
    admin.update_queue("r2-max", pb.QueueSettings(default_max_attempts=1), ["default_max_attempts"])
    third = stubs.enqueue("r2-max")
    r = stubs.reserve_job("r2-max", third)
    stubs.worker.Nack(wpb.NackRequest(job_id=third, lease_id=r.lease_id, retry=wpb.RetryDirective()))
    assert admin.get_job(third).state == pb.DEAD_LETTERED


# ---------------------------------------------------------------- reproduction 4 and every Timestamp


def _ts(seconds: int, nanos: int = 0) -> timestamp_pb2.Timestamp:
    return timestamp_pb2.Timestamp(seconds=seconds, nanos=nanos)


def test_repro_4_timestamp_filters_out_of_range_are_refused(stubs: AdminStubs) -> None:
    r = refusal(lambda: stubs.call("ListJobs", apb.ListJobsRequest(finished_after=_ts(2**62))))
    assert (r.code, r.reason) == (grpc.StatusCode.INVALID_ARGUMENT, "INVALID_ARGUMENT")
    assert r.metadata == {"field": "finished_after", "limit": str(MAX_TIMESTAMP_SECONDS), "actual": str(2**62)}
    r = refusal(lambda: stubs.call("RequeueDeadLettered", apb.RequeueDeadLetteredRequest(
        filter=apb.DeadLetterFilter(dead_lettered_before=_ts(-(2**62))))))
    assert (r.code, r.reason) == (grpc.StatusCode.INVALID_ARGUMENT, "INVALID_ARGUMENT")
    assert r.metadata == {"field": "filter.dead_lettered_before", "limit": str(MIN_TIMESTAMP_SECONDS),
                          "actual": str(-(2**62))}


def test_timestamp_filters_at_the_limits_are_taken_and_one_past_refused(stubs: AdminStubs) -> None:
    stubs.dead_letter("ts-edge")
    top, bottom = MAX_TIMESTAMP_SECONDS, MIN_TIMESTAMP_SECONDS
    listing = stubs.call("ListJobs", apb.ListJobsRequest(queue="ts-edge", state=pb.DEAD_LETTERED,
                                                         finished_after=_ts(bottom), finished_before=_ts(top)))
    assert len(listing.jobs) == 1
    dry = stubs.call("RequeueDeadLettered", apb.RequeueDeadLetteredRequest(
        filter=apb.DeadLetterFilter(queue="ts-edge", dead_lettered_after=_ts(bottom),
                                    dead_lettered_before=_ts(top, 999_999_999)), dry_run=True))
    assert dry.matched == 1
    for field, req in (("finished_before", apb.ListJobsRequest(finished_before=_ts(top + 1))),
                       ("finished_after", apb.ListJobsRequest(finished_after=_ts(bottom - 1)))):
        r = refusal(lambda q=req: stubs.call("ListJobs", q))  # type: ignore[misc]
        assert r.code == grpc.StatusCode.INVALID_ARGUMENT and r.metadata["field"] == field
    for nanos, limit in ((1_000_000_000, "999999999"), (-1, "0")):
        r = refusal(lambda n=nanos: stubs.call("RequeueDeadLettered", apb.RequeueDeadLetteredRequest(  # type: ignore[misc]
            filter=apb.DeadLetterFilter(dead_lettered_after=_ts(0, n)))))
        assert r.metadata == {"field": "filter.dead_lettered_after.nanos", "limit": limit, "actual": str(nanos)}


def test_a_page_token_with_numbers_outside_int64_is_invalid_argument(stubs: AdminStubs) -> None:
    import base64

    from sepp.server.admin.cursor import fingerprint
    from sepp.storage.admin import JobQuery

    for key in ([2**70], [1, 2, 3], ["q", 1]):
        raw = json.dumps({"f": fingerprint(JobQuery()), "k": key}).encode()
        token = base64.urlsafe_b64encode(raw).decode().rstrip("=")
        r = refusal(lambda t=token: stubs.call("ListJobs", apb.ListJobsRequest(page_token=t)))  # type: ignore[misc]
        assert (r.code, r.metadata.get("field")) == (grpc.StatusCode.INVALID_ARGUMENT, "page_token"), key


# ---------------------------------------------------------------- worker arguments


def _worker_refusal(call: Callable[[], Any]) -> dict[str, str]:
    """INVALID_ARGUMENT with reason INVALID_ARGUMENT; the ErrorInfo metadata."""
    r = refusal(call)
    assert (r.code, r.reason) == (grpc.StatusCode.INVALID_ARGUMENT, "INVALID_ARGUMENT"), r
    return r.metadata


def test_reserve_and_extend_leases_at_a_day_and_one_nanosecond_past(stubs: AdminStubs) -> None:
    stubs.enqueue("w-lease")
    day = duration_pb2.Duration(seconds=86_400)
    past = duration_pb2.Duration(seconds=86_400, nanos=1)
    (r,) = stubs.worker.Reserve(wpb.ReserveRequest(queues=["w-lease"], max_jobs=1, lease_duration=day)).reservations
    assert r.lease_expires_at.seconds >= time.time() + 86_400 - 60
    meta = _worker_refusal(lambda: stubs.worker.Reserve(wpb.ReserveRequest(
        queues=["w-lease"], max_jobs=1, lease_duration=past)))
    assert meta == {"field": "lease_duration", "limit": "86400", "actual": "86400.000000001"}
    assert stubs.worker.ExtendLease(wpb.ExtendLeaseRequest(job_id=r.job.id, lease_id=r.lease_id,
                                                           extend_by=day)).lease_expires_at.seconds > 0
    meta = _worker_refusal(lambda: stubs.worker.ExtendLease(wpb.ExtendLeaseRequest(
        job_id=r.job.id, lease_id=r.lease_id, extend_by=past)))
    assert meta == {"field": "extend_by", "limit": "86400", "actual": "86400.000000001"}
    meta = _worker_refusal(lambda: stubs.worker.ExtendLease(wpb.ExtendLeaseRequest(
        job_id=r.job.id, lease_id=r.lease_id, extend_by=duration_pb2.Duration(seconds=2**63 - 1))))
    assert meta == {"field": "extend_by", "limit": "86400", "actual": str(2**63 - 1)}


def test_reserve_wait_is_bounded_by_max_reserve_wait(stubs: AdminStubs) -> None:
    stubs.enqueue("w-wait")  # a job is waiting, so the 30 s long-poll returns at once
    got = stubs.worker.Reserve(wpb.ReserveRequest(queues=["w-wait"], max_jobs=1,
                                                  wait=duration_pb2.Duration(seconds=30)), timeout=10)
    assert len(got.reservations) == 1
    meta = _worker_refusal(lambda: stubs.worker.Reserve(wpb.ReserveRequest(
        queues=["w-wait"], max_jobs=1, wait=duration_pb2.Duration(seconds=30, nanos=1))))
    assert meta == {"field": "wait", "limit": "30", "actual": "30.000000001"}


def test_malformed_worker_durations_are_refused_cleanly(stubs: AdminStubs) -> None:
    stubs.enqueue("w-bad")
    (r,) = stubs.reserve("w-bad")
    bad = [(duration_pb2.Duration(seconds=1, nanos=1_000_000_000), "1000000000"),
           (duration_pb2.Duration(seconds=10, nanos=-5), "-5"),
           (duration_pb2.Duration(seconds=0, nanos=-1_000_000_000), "-1000000000")]
    for d, actual in bad:
        for field, call in (
                ("lease_duration", lambda v=d: stubs.worker.Reserve(wpb.ReserveRequest(  # type: ignore[misc]
                    queues=["w-bad"], max_jobs=1, lease_duration=v))),
                ("wait", lambda v=d: stubs.worker.Reserve(wpb.ReserveRequest(  # type: ignore[misc]
                    queues=["w-bad"], max_jobs=1, wait=v))),
                ("extend_by", lambda v=d: stubs.worker.ExtendLease(wpb.ExtendLeaseRequest(  # type: ignore[misc]
                    job_id=r.job.id, lease_id=r.lease_id, extend_by=v))),
                ("retry_after", lambda v=d: stubs.worker.Nack(wpb.NackRequest(  # type: ignore[misc]
                    job_id=r.job.id, lease_id=r.lease_id, retry_after=v)))):
            meta = _worker_refusal(call)
            assert (meta["field"], meta["actual"]) == (f"{field}.nanos", actual), (field, meta)
    settled = stubs.worker.Settle(wpb.SettleRequest(items=[wpb.SettleItem(nack=wpb.NackRequest(
        job_id=r.job.id, lease_id=r.lease_id, retry_after=bad[0][0]))])).results
    assert [(s.ok, s.error_reason) for s in settled] == [(False, "INVALID_ARGUMENT")]
    assert "retry_after.nanos" in settled[0].error_message


# ---------------------------------------------------------------- item 2: an old database


def _write_settings(db: Path, rows: dict[str, str]) -> None:
    """Overwrite queue rows' settings directly in the SQLite file (the server is stopped)."""
    conn = sqlite3.connect(db)
    try:
        for name, settings in rows.items():
            conn.execute("INSERT INTO queues (name, settings, paused, declared, created_at, updated_at) "
                         "VALUES (?, ?, 0, 1, 0, 0) ON CONFLICT(name) DO UPDATE SET settings = excluded.settings",
                         (name, settings))
        conn.commit()
    finally:
        conn.close()


@pytest.mark.sqlite_only(reason="writes an old queue row into the sepp.db file with sqlite3")
def test_an_out_of_range_stored_setting_is_clamped_logged_once_and_never_blocks_a_read(
        server_factory: ServerFactory, tmp_path: Path) -> None:
    data = tmp_path / "old-db"
    proc = server_factory(data_dir=data)
    with AdminClient(proc.grpc_target) as admin:
        admin.declare_queue("old", pb.QueueSettings(default_priority=3), ["default_priority"])
    assert proc.terminate() == 0
    stored = {"default_priority": 3, "default_max_attempts": 2, "lease_duration": 1e9,
              "dedup_window": float(2**63 - 1), "retry_base": 1e13, "retry_cap": 1e13, "retry_jitter": 5.0,
              "completed_retention": 1e13, "dead_letter_retention": 1e13,
              "limits": {"max_payload_bytes": 2**70, "allowed_encodings": [], "max_custom_entries": 32,
                         "max_custom_key_bytes": 64, "max_custom_bytes": 8192}, "retired_setting": 1}
    _write_settings(data / "sepp.db", {"old": json.dumps(stored), "junk": "{not json"})
    proc.start()
    with AdminClient(proc.grpc_target) as admin, connect(proc.grpc_target) as stubs:
        for _ in range(3):
            info = stubs.producer.GetServerInfo(ppb.GetServerInfoRequest(), timeout=10)
            assert {q.name for q in info.queues} >= {"old", "junk"}
            assert {q.name for q in admin.list_queues()} >= {"old", "junk"}
        old = admin.get_queue("old").settings
        assert old.default_priority == 3, "the valid values are kept"
        assert old.dedup_window.seconds == TEN_YEARS and old.completed_retention.seconds == TEN_YEARS
        assert old.retry_base.seconds == YEAR and old.retry_cap.seconds == YEAR and old.retry_jitter == 1.0
        assert old.lease_duration.seconds == 86_400
        assert old.limits.max_payload_bytes == 2**31 - 1
        assert admin.get_queue("junk").settings.default_max_attempts == 10, "unreadable row → defaults"
        for page in ("/", "/queues/old", "/queues/junk"):
            with urllib.request.urlopen(proc.http_url + page, timeout=10) as resp:
                assert resp.status == 200, page
        # The policy uses the clamped values: keyed enqueue, nack retry, dead-lettering, ack.
        with Client(proc.grpc_target) as client:
            ack = client.enqueue(EnqueueRequest("old", "t").with_idempotency_key("k"))
            assert client.enqueue(EnqueueRequest("old", "t").with_idempotency_key("k")).job_id == ack.job_id
        r = stubs.reserve_job("old", ack.job_id)
        assert stubs.worker.Nack(wpb.NackRequest(job_id=ack.job_id, lease_id=r.lease_id,
                                                 retry=wpb.RetryDirective())).state == pb.SCHEDULED
        other = stubs.enqueue("old")
        r = stubs.reserve_job("old", other)
        stubs.worker.Ack(wpb.AckRequest(job_id=other, lease_id=r.lease_id))
        assert admin.get_job(other).state == pb.COMPLETED
    warnings = [line for line in proc.output if "stored settings out of range" in line]
    assert len(warnings) == 2, warnings  # once per queue at start, not per request
    old_line = next(line for line in warnings if "'old'" in line)
    assert "dedup_window=9.223372036854776e+18 is outside 0..315360000; using 315360000" in old_line
    assert "retired_setting" in old_line and "lease_duration=1000000000 is outside 0.001..86400" in old_line
