"""``fill_reservation`` (the Reserve hot path) writes exactly what the general converter
writes: the job as ``job_to_proto`` gives it, plus the reservation's lease id, expiry
and attempt — for every optional part a record can carry."""

from __future__ import annotations

import json
from typing import Any

import pytest

from sepp.api.v1 import common_pb2 as pb
from sepp.api.v1 import worker_pb2 as wpb
from sepp.server.rpc.convert import fill_reservation, job_to_proto
from sepp.storage.base import JobRecord

NOW = 1_790_000_000_123_456


def _record(**changes: Any) -> JobRecord:
    base = JobRecord(b"\x01" * 16, "emails", "welcome", 3, 5, NOW - 7, NOW - 9, 2, 25, b'{"a": 1}',
                     "application/json", None, None, b"\x02" * 16, NOW + 30_000_000, "host:1", NOW, None, None,
                     None, 0, 42)
    return base._replace(**changes)


_extras = pb.EnqueueRequest(custom={"n": pb.CustomValue(int_value=7)},
                            trace_context={"traceparent": "00-" + "1" * 32 + "-" + "2" * 16 + "-01"})
_history = json.dumps([{"attempt": 1, "worker_id": "w", "started_at": NOW - 5, "ended_at": NOW - 4,
                        "outcome": "retry", "error_message": "boom", "error_detail": "trace"}])


@pytest.mark.parametrize("changes", [
    {},
    {"extras": _extras.SerializeToString()},
    {"history": _history, "node": "node-a"},
    {"idempotency_key": "k-1", "cancel_requested": 1, "reason": "why"},
    {"payload": b"", "encoding": "", "worker_id": None},
], ids=["plain", "custom+trace", "history", "key+cancel+reason", "empty"])
def test_the_hot_path_writes_what_the_general_converter_writes(changes: dict[str, Any]) -> None:
    rec = _record(**changes)
    fast = wpb.Reservation()
    fill_reservation(fast, rec)
    job = job_to_proto(rec)
    slow = wpb.Reservation(job=job, lease_id=job.lease_id, lease_expires_at=job.lease_expires_at,
                           attempt=rec.attempt)
    assert fast == slow
    assert fast.lease_id == "02020202-0202-0202-0202-020202020202"
    assert fast.lease_expires_at.seconds * 1_000_000 + fast.lease_expires_at.nanos // 1000 == NOW + 30_000_000
