"""The job a schedule's run enqueues: an ``EnqueueRequest`` built from a
``PeriodicSettings``, with ``scheduled_at`` = the tick time and the tick's idempotency key."""

from __future__ import annotations

from google.protobuf.timestamp_pb2 import Timestamp

from sepp import wire
from sepp.api.v1 import common_pb2 as pb
from sepp.api.v1 import periodic_pb2 as ppb
from sepp.server.periodic.spec import PeriodicSettings

__all__ = ["fill_job_options", "job_request"]

_S = 1_000_000


def job_request(spec: PeriodicSettings, at_us: int, key: str) -> pb.EnqueueRequest:
    """The request of one run of ``spec``: its queue, job type, payload (UTF-8 text with its
    encoding; none when empty), custom map, priority and max_attempts (when set),
    ``scheduled_at = at_us`` (µs UTC: the tick, or the trigger time) and ``key`` as the
    idempotency key."""
    req = pb.EnqueueRequest(queue=spec.queue, job_type=spec.job_type, idempotency_key=key,
                            scheduled_at=Timestamp(seconds=at_us // _S, nanos=at_us % _S * 1000))
    if spec.payload:
        req.payload.CopyFrom(pb.Payload(data=spec.payload.encode(), encoding=spec.encoding))
    fill_job_options(req, spec)
    return req


def fill_job_options(msg: pb.EnqueueRequest | ppb.PeriodicSchedule, spec: PeriodicSettings) -> None:
    """Write ``spec``'s options of the jobs it enqueues into ``msg`` (the job's request, or the
    schedule as the admin API shows it): its custom map, and priority and max_attempts when
    set (unset ones stay unset: the queue's defaults apply)."""
    for name, value in spec.custom.items():
        msg.custom[name].CopyFrom(wire.custom_to_proto(value))
    if spec.priority is not None:
        msg.priority = spec.priority
    if spec.max_attempts is not None:
        msg.max_attempts = spec.max_attempts
