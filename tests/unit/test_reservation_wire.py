"""``ReservationWriter`` (the Reserve hot path) writes exactly the bytes protobuf writes for
the reservations ``fill_reservation`` builds — for plain jobs of one or many kinds, every
size class of payload and time, jobs that take the message path in between, and damaged rows,
which raise as ``fill_reservation`` raises and add nothing."""

from __future__ import annotations

import json
from typing import Any

import pytest
from support.reservations import NOW, leased_record

from sepp.api.v1 import common_pb2 as pb
from sepp.api.v1 import worker_pb2 as wpb
from sepp.limits import MAX_TIMESTAMP_SECONDS, MIN_TIMESTAMP_SECONDS
from sepp.server.rpc.convert import ReservationWriter, fill_reservation
from sepp.storage.base import JobRecord


def _expected(records: list[JobRecord]) -> bytes:
    resp = wpb.ReserveResponse()
    for rec in records:
        fill_reservation(resp.reservations.add(), rec)
    return resp.SerializeToString()


def _written(records: list[JobRecord]) -> bytes:
    writer = ReservationWriter()
    for rec in records:
        writer.add(rec)
    return bytes(writer)


_extras = pb.EnqueueRequest(custom={"n": pb.CustomValue(int_value=7)},
                            trace_context={"traceparent": "00-" + "1" * 32 + "-" + "2" * 16 + "-01"})
_history = json.dumps([{"attempt": 1, "worker_id": "w", "started_at": NOW - 5, "ended_at": NOW - 4,
                        "outcome": "retry", "error_message": "boom", "error_detail": "trace"}])
_MIN_US, _MAX_US = MIN_TIMESTAMP_SECONDS * 1_000_000, MAX_TIMESTAMP_SECONDS * 1_000_000 + 999_999


@pytest.mark.parametrize("changes", [
    {},
    {"payload": b""},
    {"payload": b"", "encoding": ""},
    {"payload": b"x" * 127},
    {"payload": b"x" * 128},
    {"payload": b"x" * 20_000},
    {"payload": bytes(range(256)) * 70},
    {"run_at": NOW // 1_000_000 * 1_000_000, "enqueued_at": 0},
    {"run_at": _MIN_US, "enqueued_at": _MAX_US},
    {"run_at": -1, "enqueued_at": 1},
    {"lease_id": None, "lease_expires_at": None, "worker_id": None, "node": None},
    {"reason": "why", "cancel_requested": 1, "priority": -3, "attempt": 70_000, "max_attempts": 2**31 - 1},
    {"queue": "q" * 300, "job_type": "é" * 100, "encoding": "e" * 200},
    {"state": 0, "priority": 0, "attempt": 0, "max_attempts": 0, "queue": "", "job_type": "", "worker_id": ""},
    {"extras": _extras.SerializeToString()},
    {"history": _history},
    {"idempotency_key": "k-1"},
    {"id": b"\x07" * 15},
    {"job_type": b"blob"},
], ids=["plain", "no-data", "empty-payload", "data-127", "data-128", "data-20k", "binary", "zero-nanos",
        "range-ends", "before-epoch", "no-lease", "flags", "long-names", "defaults", "custom+trace", "history",
        "key", "short-id", "bytes-type"])
def test_a_job_is_written_as_protobuf_writes_it(changes: dict[str, Any]) -> None:
    # Each case alone, then after and between plain jobs of its kind (a kind's shared bytes
    # reused) and of another kind.
    rec = leased_record(**changes)
    assert _written([rec]) == _expected([rec])
    many = [leased_record(1), rec, leased_record(2, **changes), leased_record(3, priority=9), rec,
            leased_record(4, **changes)]
    assert _written(many) == _expected(many)


def test_an_answer_of_many_kinds_and_times_is_written_as_protobuf_writes_it() -> None:
    records = [leased_record(i, queue=f"q{i % 3}", attempt=1 + i % 2, run_at=NOW + i * 1_000 * (i % 4),
                       enqueued_at=NOW - (i % 5), payload=b"p" * (i * 37 % 300)) for i in range(300)]
    assert _written(records) == _expected(records)
    assert _written([]) == b"" == wpb.ReserveResponse().SerializeToString()


@pytest.mark.parametrize("changes", [
    {"payload": "text"}, {"payload": 7}, {"run_at": "soon"}, {"run_at": 2**63 - 1}, {"enqueued_at": -(2**63)},
    {"run_at": 1.5}, {"priority": 1.5}, {"priority": "high"}, {"attempt": 2**63 - 1}, {"job_type": b"\xff"},
    {"encoding": 3}, {"id": "not bytes"},
], ids=repr)
def test_a_damaged_row_raises_as_fill_reservation_does_and_adds_nothing(changes: dict[str, Any]) -> None:
    rec = leased_record(**changes)
    with pytest.raises(Exception) as slow:
        fill_reservation(wpb.Reservation(), rec)
    for before in ([], [leased_record(1)]):  # alone, and after a plain job of its kind
        writer = ReservationWriter()
        for good in before:
            writer.add(good)
        with pytest.raises(type(slow.value)):
            writer.add(rec)
        writer.add(leased_record(2))
        assert bytes(writer) == _expected([*before, leased_record(2)])


# ---------- a damaged value equal to a healthy one
# ``ReservationWriter`` attacked: a damaged shared column whose value equals a healthy one (``5.0
# == 5``) hits the kind a healthy job built, so the writer hands the job out where
# ``fill_reservation`` raises (and Reserve would bury it as DAMAGED_ROW). Not reachable from the
# stores today (SQLite's INTEGER affinity stores 5.0 as 5; PostgreSQL's columns are typed), so
# recorded as a strict xfail rather than fixed on the per-job hot path.

@pytest.mark.xfail(strict=True, reason="the kind key compares values, not types")
@pytest.mark.parametrize("changes", [{"priority": 5.0}, {"attempt": 2.0}, {"max_attempts": 25.0},
                                     {"state": 2.0}, {"lease_expires_at": float(NOW + 30_000_000)}], ids=repr)
def test_a_float_equal_to_a_healthy_int_raises_after_a_healthy_job_of_its_kind(changes: dict[str, Any]) -> None:
    rec = leased_record(**changes)
    with pytest.raises(TypeError):
        fill_reservation(wpb.Reservation(), rec)
    writer = ReservationWriter()
    writer.add(leased_record(1))
    with pytest.raises(TypeError):
        writer.add(rec)
