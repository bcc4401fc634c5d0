"""Attacks on the Reserve answer written as wire bytes (``ReservationWriter``) on a real
server: jobs of every payload size class, extreme priorities and times, encodings, custom
values, trace context, idempotency keys and attempt histories, mixed in one answer — what
the client parses is the job as stored (GetJob), field by field."""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from support.servers import module_server
from support.worker import fast_queue, wire_for

from sepp.api.v1 import common_pb2 as pb
from sepp.testing import ServerProcess

FIELDS = ("id", "queue", "job_type", "payload", "custom", "priority", "max_attempts", "attempt", "state", "run_at",
          "enqueued_at", "idempotency_key", "trace_context", "lease_id", "lease_expires_at", "worker_id",
          "cancel_requested", "node", "dead_letter_reason")


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory, backend: str) -> Iterator[ServerProcess]:
    yield from module_server(tmp_path_factory, backend, queue_defaults=fast_queue(retry_base=0.01))


def test_every_reserved_job_parses_as_stored(srv: ServerProcess) -> None:
    queue = f"rw-{uuid.uuid4().hex[:10]}"
    big = 2**63 - 1
    reqs = []
    for size in (0, 1, 127, 128, 129, 16_383, 16_384, 16_385, 200_000):
        reqs.append(pb.EnqueueRequest(queue=queue, job_type="t", payload=pb.Payload(data=b"\xff" * size)))
    for prio in (0, 9):
        reqs.append(pb.EnqueueRequest(queue=queue, job_type="t", priority=prio))
    reqs.append(pb.EnqueueRequest(queue=queue, job_type="é" * 50, payload=pb.Payload(data=b"{}",
                                                                                      encoding="application/json")))
    reqs.append(pb.EnqueueRequest(queue=queue, job_type="t", idempotency_key="k-" + uuid.uuid4().hex))
    reqs.append(pb.EnqueueRequest(queue=queue, job_type="t", custom={
        "n": pb.CustomValue(int_value=big), "m": pb.CustomValue(int_value=-big - 1),
        "s": pb.CustomValue(string_value=""), "f": pb.CustomValue(float_value=-0.0)}))
    reqs.append(pb.EnqueueRequest(queue=queue, job_type="t",
                                  trace_context={"traceparent": "00-" + "a" * 32 + "-" + "b" * 16 + "-01"}))
    reqs.append(pb.EnqueueRequest(queue=queue, job_type="t", max_attempts=5))  # gets a history below
    with wire_for(srv, queue) as w:
        # the last one first: delivered and nacked, so it comes back with an attempt history
        *rest, with_history = reqs
        (hist_id,) = w.enqueue_many([with_history])
        w.nack(w.reserve_one([queue]), "retry_after", delay=0.0, message="boom", detail="x" * 300)
        ids = [hist_id, *w.enqueue_many(rest)]
        got: list[Any] = []
        deadline = dt.datetime.now() + dt.timedelta(seconds=10)
        while len(got) < len(ids) and dt.datetime.now() < deadline:
            got += w.reserve([queue], max_jobs=len(ids), wait=1.0)
        assert sorted(r.job.id for r in got) == sorted(ids)
        assert [r.attempt for r in got if r.job.id == hist_id] == [2]
        for res in got:
            stored = w.get_job(res.job.id)
            for name in FIELDS:
                assert getattr(res.job, name) == getattr(stored, name), (name, res.job.id)
            assert (res.lease_id, res.lease_expires_at, res.attempt) == (
                stored.lease_id, stored.lease_expires_at, stored.attempt)
            if res.job.id == hist_id:
                assert len(res.job.attempts) == 1 and res.job.attempts[0].error_message == "boom"
                assert res.job.attempts[0] == stored.attempts[0]
