"""Store records → protobuf messages (reservations, admin views)."""

from __future__ import annotations

import logging

from google.protobuf import timestamp_pb2
from google.protobuf.message import DecodeError

from sepp.api.v1 import common_pb2 as pb
from sepp.api.v1 import worker_pb2 as wpb
from sepp.limits import MAX_TIMESTAMP_SECONDS, MIN_TIMESTAMP_SECONDS
from sepp.server.engine import job_id_text
from sepp.storage.base import JobRecord, State

_COMPLETED = int(State.COMPLETED)


log = logging.getLogger("sepp.rpc")

#: µs range of a google.protobuf.Timestamp (0001-01-01 .. 9999-12-31T23:59:59.999999Z).
_MIN_US, _MAX_US = MIN_TIMESTAMP_SECONDS * 1_000_000, MAX_TIMESTAMP_SECONDS * 1_000_000 + 999_999


def ts(us: int) -> timestamp_pb2.Timestamp:
    """µs since the epoch (UTC) → Timestamp."""
    t = timestamp_pb2.Timestamp()
    t.seconds, rem = divmod(us, 1_000_000)
    t.nanos = rem * 1000
    return t


def set_ts(target: timestamp_pb2.Timestamp, us: int) -> None:
    """Write µs since the epoch (UTC) into ``target`` in place."""
    target.seconds, rem = divmod(us, 1_000_000)
    target.nanos = rem * 1000


def job_to_proto(rec: JobRecord, with_history: bool = True) -> pb.Job:
    """A full ``Job`` message for a record (``with_history`` adds the attempt history)."""
    job = pb.Job()
    fill_job(job, rec, with_history)
    return job


def fill_job(job: pb.Job, rec: JobRecord, with_history: bool = True) -> None:
    """Write ``rec`` into the (empty) ``job`` message in place — no copy of the payload."""
    job.id = job_id_text(rec.id)
    job.queue = rec.queue
    job.job_type = rec.job_type
    payload = job.payload
    payload.data = rec.payload
    payload.encoding = rec.encoding
    job.priority = rec.priority
    job.max_attempts = rec.max_attempts
    job.attempt = rec.attempt
    job.state = rec.state  # type: ignore[assignment]
    if rec.idempotency_key:
        job.idempotency_key = rec.idempotency_key
    if rec.reason:
        job.dead_letter_reason = rec.reason
    if rec.worker_id:
        job.worker_id = rec.worker_id
    if rec.node:
        job.node = rec.node
    if rec.cancel_requested:
        job.cancel_requested = True
    set_ts(job.run_at, rec.run_at)
    set_ts(job.enqueued_at, rec.enqueued_at)
    if rec.extras:
        _merge_extras(job, rec.extras, rec.id)
    if rec.finished_at is not None:
        set_ts(job.finished_at, rec.finished_at)
    if rec.lease_id is not None:
        job.lease_id = job_id_text(rec.lease_id)
    if rec.lease_expires_at is not None:
        set_ts(job.lease_expires_at, rec.lease_expires_at)
    if with_history and (rec.history or rec.state == _COMPLETED):
        _fill_attempts(job, rec)


def _merge_extras(job: pb.Job, extras: bytes, job_id: bytes) -> None:
    """The custom map and trace context from the stored ``extras`` blob; a blob that does not
    decode (a damaged row) is left out and logged, so the rest of the job is still readable."""
    try:
        more = pb.EnqueueRequest.FromString(extras)
    except (DecodeError, TypeError):
        log.warning("job %s: its stored custom map / trace context does not decode; shown without them",
                    job_id.hex() if isinstance(job_id, bytes) else job_id)
        return
    job.custom.MergeFrom(more.custom)
    job.trace_context.MergeFrom(more.trace_context)


def _int32(value: int) -> int:
    return max(-(2**31), min(2**31 - 1, value))


def _fill_attempts(job: pb.Job, rec: JobRecord) -> None:
    """The job's attempt history (``JobRecord.attempt_entries``, which reads a damaged history
    as far as it can) as ``job.attempts``; a time outside the Timestamp range is left unset."""
    for entry in rec.attempt_entries():
        attempt = job.attempts.add(attempt=_int32(entry["attempt"]), worker_id=entry["worker_id"],
                                   node=entry["node"], outcome=entry["outcome"], error_message=entry["error_message"],
                                   error_detail=entry["error_detail"])
        for name in ("started_at", "ended_at"):
            us = entry.get(name)
            if us is not None and _MIN_US <= us <= _MAX_US:
                set_ts(getattr(attempt, name), us)


def fill_reservation(res: wpb.Reservation, rec: JobRecord) -> None:
    """Write a just-leased ``rec`` into the (empty) ``res``: the job (as ``fill_job`` would)
    and the lease (id, expiry, attempt), with the lease id formatted once and the
    timestamps written inline — the per-job hot path of ``Reserve``.

    Raises ``TypeError``/``ValueError`` for a damaged row (a column of the wrong type, a time
    outside the Timestamp range): the caller does not hand such a job out (issue 14 O4)."""
    (id_, queue, job_type, state, priority, run_at, enqueued_at, attempt, max_attempts, payload, encoding, extras,
     idem, lease_id, lease_expires_at, worker_id, _started, history, _finished, reason, cancel, _seq, node) = rec
    if not (_MIN_US <= run_at <= _MAX_US and _MIN_US <= enqueued_at <= _MAX_US):
        # A damaged row (issue 14 O4): a time no Timestamp can carry; the caller buries it.
        raise ValueError("run_at or enqueued_at is outside the Timestamp range")
    lease_text = job_id_text(lease_id) if lease_id is not None else ""
    res.lease_id = lease_text
    res.attempt = attempt
    job = res.job
    job.id = job_id_text(id_)
    job.queue = queue
    job.job_type = job_type
    data = job.payload
    data.data = payload
    data.encoding = encoding
    job.priority = priority
    job.max_attempts = max_attempts
    job.attempt = attempt
    job.state = state  # type: ignore[assignment]
    job.lease_id = lease_text
    if idem:
        job.idempotency_key = idem
    if reason:
        job.dead_letter_reason = reason
    if worker_id:
        job.worker_id = worker_id
    if node:
        job.node = node
    if cancel:
        job.cancel_requested = True
    t = job.run_at
    t.seconds, rem = divmod(run_at, 1_000_000)
    t.nanos = rem * 1000
    t = job.enqueued_at
    t.seconds, rem = divmod(enqueued_at, 1_000_000)
    t.nanos = rem * 1000
    if lease_expires_at is not None:
        seconds, rem = divmod(lease_expires_at, 1_000_000)
        t = job.lease_expires_at
        t.seconds = seconds
        t.nanos = rem * 1000
        t = res.lease_expires_at
        t.seconds = seconds
        t.nanos = rem * 1000
    if extras:
        _merge_extras(job, extras, id_)
    if history:
        _fill_attempts(job, rec)


class ReservationFiller:
    """``fill_reservation`` for the many jobs of one ``Reserve`` answer, cheaper per job.

    The jobs of one answer share most of their fields (queue, job type, state, priority,
    attempt, max_attempts, encoding, lease id and expiry, worker, node): a plain job (no
    custom map, trace context, attempt history or idempotency key) is written by copying a
    finished message of its kind (``CopyFrom``, one C call) and setting only what is its
    own — id, payload bytes, run_at, enqueued_at — instead of ~20 field writes. The first
    job of each kind builds its template with ``fill_reservation`` itself, so a damaged
    column raises exactly as there (``TypeError``/``ValueError``/``OverflowError``); the
    per-job columns are checked the same way. Anything else goes through
    ``fill_reservation``. One filler per answer: templates hold one call's lease."""

    __slots__ = ("_templates",)

    def __init__(self) -> None:
        self._templates: dict[tuple[object, ...], wpb.Reservation] = {}

    def fill(self, res: wpb.Reservation, rec: JobRecord) -> None:
        """Write ``rec`` into the (empty) ``res``, as ``fill_reservation`` does (same errors)."""
        (id_, queue, job_type, state, priority, run_at, enqueued_at, attempt, max_attempts, payload, encoding, extras,
         idem, lease_id, lease_expires_at, worker_id, _started, history, _finished, reason, cancel, _seq, node) = rec
        if extras or history or idem:
            fill_reservation(res, rec)
            return
        key = (queue, job_type, state, priority, attempt, max_attempts, encoding, lease_id, lease_expires_at,
               worker_id, node, reason, cancel)
        template = self._templates.get(key)
        if template is None:
            template = wpb.Reservation()
            fill_reservation(template, rec)  # raises for a damaged shared column
            self._templates[key] = template
            res.CopyFrom(template)
            return
        if not (_MIN_US <= run_at <= _MAX_US and _MIN_US <= enqueued_at <= _MAX_US):
            raise ValueError("run_at or enqueued_at is outside the Timestamp range")
        res.CopyFrom(template)
        job = res.job
        job.id = job_id_text(id_)
        job.payload.data = payload
        t = job.run_at
        t.seconds, rem = divmod(run_at, 1_000_000)
        t.nanos = rem * 1000
        t = job.enqueued_at
        t.seconds, rem = divmod(enqueued_at, 1_000_000)
        t.nanos = rem * 1000
