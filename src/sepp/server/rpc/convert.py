"""Store records → protobuf messages (reservations, admin views)."""

from __future__ import annotations

import json

from google.protobuf import timestamp_pb2

from sepp.api.v1 import common_pb2 as pb
from sepp.server.engine import job_id_text
from sepp.storage.base import JobRecord


def ts(us: int) -> timestamp_pb2.Timestamp:
    """µs since the epoch (UTC) → Timestamp."""
    t = timestamp_pb2.Timestamp()
    t.seconds, rem = divmod(us, 1_000_000)
    t.nanos = rem * 1000
    return t


def job_to_proto(rec: JobRecord, with_history: bool = True) -> pb.Job:
    """A full ``Job`` message for a record."""
    job = pb.Job(id=job_id_text(rec.id), queue=rec.queue, job_type=rec.job_type,
                 payload=pb.Payload(data=rec.payload, encoding=rec.encoding), priority=rec.priority,
                 max_attempts=rec.max_attempts, attempt=rec.attempt, state=rec.state,  # type: ignore[arg-type]
                 idempotency_key=rec.idempotency_key or "", dead_letter_reason=rec.reason or "",
                 worker_id=rec.worker_id or "", cancel_requested=rec.cancel_requested)
    job.run_at.CopyFrom(ts(rec.run_at))
    job.enqueued_at.CopyFrom(ts(rec.enqueued_at))
    if rec.extras:
        extras = pb.EnqueueRequest.FromString(rec.extras)
        job.custom.MergeFrom(extras.custom)
        job.trace_context.MergeFrom(extras.trace_context)
    if rec.finished_at is not None:
        job.finished_at.CopyFrom(ts(rec.finished_at))
    if rec.lease_id is not None:
        job.lease_id = job_id_text(rec.lease_id)
    if rec.lease_expires_at is not None:
        job.lease_expires_at.CopyFrom(ts(rec.lease_expires_at))
    if with_history and rec.history:
        for entry in json.loads(rec.history):
            attempt = job.attempts.add(attempt=entry["attempt"], worker_id=entry["worker_id"],
                                       outcome=entry["outcome"], error_message=entry["error_message"],
                                       error_detail=entry["error_detail"])
            if entry.get("started_at") is not None:
                attempt.started_at.CopyFrom(ts(entry["started_at"]))
            attempt.ended_at.CopyFrom(ts(entry["ended_at"]))
    return job
