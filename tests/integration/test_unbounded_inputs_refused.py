"""Values that once entered unbounded, each now refused at the edge with a catalogued answer
(or made harmless), through a real ``sepp serve`` and its public surfaces (admin client, raw
stubs, the UI over HTTP).

* ``limits.allowed_encodings``: at most 64 labels, each at most ``max_encoding_bytes``
  (a 1M-label list was stored and pushed GetServerInfo past the message cap, so every
  default ``Client.enqueue`` failed — reproduction 1 by another field);
* ``Settle``: at most 10,000 items (1M empty items cost 5 s of the event loop and answered
  RESOURCE_EXHAUSTED without an ErrorInfo);
* ``GetQueueStats``: a name repeated 200,000 times is one queue's stats (it was a minute
  past the deadline and the server stalled ~30 s after);
* ``Nack.retry_after``: refused with the horizon as ``limit`` and the exact value;
* the UI's enqueue form: a schedule past year 9999 in UTC is a form error, not a 500.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import httpx
import pytest
from google.protobuf import duration_pb2, field_mask_pb2
from support.admin import AdminStubs, connect
from support.failures import fails as refusal
from support.servers import backend_config

from sepp import Client, EnqueueRequest
from sepp.api.v1 import admin_pb2 as apb
from sepp.api.v1 import common_pb2 as pb
from sepp.api.v1 import producer_pb2 as ppb
from sepp.api.v1 import worker_pb2 as wpb
from sepp.limits import MAX_ALLOWED_ENCODINGS, MAX_SETTLE_BATCH
from sepp.testing import ServerProcess

HORIZON = 365 * 86400


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory, backend: str) -> Iterator[ServerProcess]:
    """One server for the module (each test uses its own queues)."""
    config = {"sweep_interval": 0.2, **backend_config(backend)}
    with ServerProcess(Path(tmp_path_factory.mktemp("attacks")), config) as proc:
        yield proc


@pytest.fixture
def stubs(srv: ServerProcess) -> Iterator[AdminStubs]:
    with connect(srv.grpc_target) as s:
        yield s


def _declare(stubs: AdminStubs, name: str, labels: list[str]) -> apb.DeclareQueueResponse:
    req = apb.DeclareQueueRequest(name=name, settings=pb.QueueSettings(limits=pb.QueueLimits(
        allowed_encodings=labels)), update_mask=field_mask_pb2.FieldMask(paths=["limits.allowed_encodings"]))
    resp: apb.DeclareQueueResponse = stubs.call("DeclareQueue", req)
    return resp


def _producers_work(srv: ServerProcess, stubs: AdminStubs) -> None:
    assert stubs.producer.GetServerInfo(ppb.GetServerInfoRequest(), timeout=10).version
    stubs.call("ListQueues", apb.ListQueuesRequest())
    with Client(srv.grpc_target) as client:  # fetches server info first, with the 16 MiB cap
        assert client.enqueue(EnqueueRequest("attack-after", "t")).job_id


def test_allowed_encodings_take_64_labels_and_refuse_65_unstored(srv: ServerProcess, stubs: AdminStubs) -> None:
    at = _declare(stubs, "enc-count", [f"e{i}" for i in range(MAX_ALLOWED_ENCODINGS)])
    assert len(at.queue.settings.limits.allowed_encodings) == 64
    past = refusal(lambda: _declare(stubs, "enc-count-past", [f"e{i}" for i in range(65)]))
    assert (past.code, past.reason) == (grpc.StatusCode.INVALID_ARGUMENT, "INVALID_ARGUMENT")
    assert past.metadata == {"field": "limits.allowed_encodings", "limit": "64", "actual": "65"}
    huge = refusal(lambda: _declare(stubs, "enc-count-past", ["e" * 10] * 1_000_000))
    assert huge.metadata == {"field": "limits.allowed_encodings", "limit": "64", "actual": "1000000"}
    assert refusal(lambda: stubs.call("GetQueue", apb.GetQueueRequest(name="enc-count-past"))).reason \
        == "QUEUE_NOT_FOUND"
    _producers_work(srv, stubs)


def test_an_encoding_label_takes_max_encoding_bytes_and_refuses_one_more(srv: ServerProcess,
                                                                          stubs: AdminStubs) -> None:
    at = _declare(stubs, "enc-label", ["x", "e" * 128])
    assert list(at.queue.settings.limits.allowed_encodings) == ["x", "e" * 128]
    past = refusal(lambda: _declare(stubs, "enc-label", ["x", "e" * 129]))
    assert past.metadata == {"field": "limits.allowed_encodings[1]", "limit": "128", "actual": "129"}
    huge = refusal(lambda: _declare(stubs, "enc-label", ["e" * 5_000_000]))
    assert huge.metadata == {"field": "limits.allowed_encodings[0]", "limit": "128", "actual": "5000000"}
    got = stubs.call("GetQueue", apb.GetQueueRequest(name="enc-label"))
    assert list(got.settings.limits.allowed_encodings) == ["x", "e" * 128], "a refused update changes nothing"
    _producers_work(srv, stubs)


def _ack(job_id: str = "00000000-0000-0000-0000-000000000000") -> wpb.SettleItem:
    return wpb.SettleItem(ack=wpb.AckRequest(job_id=job_id, lease_id=job_id))


def test_settle_takes_10000_items_and_refuses_10001_whole(stubs: AdminStubs) -> None:
    at = stubs.worker.Settle(wpb.SettleRequest(items=[_ack()] * MAX_SETTLE_BATCH), timeout=60)
    assert len(at.results) == MAX_SETTLE_BATCH and not any(r.ok for r in at.results)
    for n in (MAX_SETTLE_BATCH + 1, 1_000_000):
        request = wpb.SettleRequest(items=[wpb.SettleItem()] * n)  # built before the clock starts
        started = time.monotonic()
        past = refusal(lambda request=request: stubs.worker.Settle(request, timeout=60))  # type: ignore[misc]
        assert (past.code, past.reason) == (grpc.StatusCode.INVALID_ARGUMENT, "INVALID_ARGUMENT")
        assert past.metadata == {"field": "items", "limit": "10000", "actual": str(n)}
        assert time.monotonic() - started < 5.0, "refused before any item is looked at"


def test_a_queue_named_200000_times_in_get_queue_stats_is_answered_once(stubs: AdminStubs) -> None:
    stubs.enqueue("stats-dup")
    started = time.monotonic()
    resp = stubs.admin.GetQueueStats(apb.GetQueueStatsRequest(queues=["stats-dup"] * 200_000), timeout=20)
    assert [s.queue for s in resp.stats] == ["stats-dup"] and resp.stats[0].ready == 1
    assert time.monotonic() - started < 10.0
    both = stubs.call("GetQueueStats", apb.GetQueueStatsRequest(queues=["stats-dup", "attack-after", "stats-dup"]))
    assert [s.queue for s in both.stats] == ["stats-dup", "attack-after"], "first-given order, each once"


def test_nack_retry_after_is_bounded_by_the_horizon_with_field_limit_and_value(stubs: AdminStubs) -> None:
    job_id = stubs.enqueue("nack-bounds")
    (res,) = stubs.reserve("nack-bounds")

    def nack(seconds: int, nanos: int = 0) -> wpb.NackResponse:
        after = duration_pb2.Duration(seconds=seconds, nanos=nanos)
        resp: wpb.NackResponse = stubs.worker.Nack(wpb.NackRequest(job_id=job_id, lease_id=res.lease_id,
                                                                   retry_after=after), timeout=10)
        return resp

    for (seconds, nanos), meta in (((HORIZON + 1, 0), {"limit": str(HORIZON), "actual": str(HORIZON + 1)}),
                                   ((HORIZON, 1), {"limit": str(HORIZON), "actual": f"{HORIZON}.000000001"}),
                                   ((2**63 - 1, 0), {"limit": str(HORIZON), "actual": str(2**63 - 1)}),
                                   ((-1, 0), {"limit": "0", "actual": "-1"})):
        past = refusal(lambda s=seconds, n=nanos: nack(s, n))  # type: ignore[misc]
        assert (past.code, past.reason) == (grpc.StatusCode.INVALID_ARGUMENT, "INVALID_ARGUMENT")
        assert past.metadata == {"field": "retry_after", **meta}
    at = nack(HORIZON)
    assert at.state == pb.SCHEDULED and at.run_at.seconds >= int(time.time()) + HORIZON - 5


@pytest.mark.parametrize(("local", "zone"), [("9999-12-31T23:59", "Etc/GMT+12"), ("0001-01-01T00:00", "Asia/Tokyo")])
def test_the_enqueue_form_refuses_a_schedule_outside_the_timestamp_range(srv: ServerProcess, local: str,
                                                                         zone: str) -> None:
    with httpx.Client(base_url=srv.http_url, timeout=20) as web:
        token = re.search(r'name="csrf_token" value="([^"]+)"', web.get("/enqueue").text)[1]  # type: ignore[index]
        form = {"csrf_token": token, "queue": "ui-range", "job_type": "t", "payload": "", "payload_format": "text",
                "scheduled_at": local, "scheduled_tz": zone, "priority": ""}
        r = web.post("/enqueue", data=form)
        assert r.status_code == 400, r.text[:300]
        assert "outside 0001-01-01 .. 9999-12-31 UTC" in r.text
        r = web.post("/enqueue", data={**form, "scheduled_at": "", "priority": "99999999999"})
        assert r.status_code == 400 and "does not fit in int32" in r.text
        ok = web.post("/enqueue", data={**form, "scheduled_at": "2020-01-01T00:00", "scheduled_tz": zone})
        assert ok.status_code == 200, "a date inside the range still enqueues"
