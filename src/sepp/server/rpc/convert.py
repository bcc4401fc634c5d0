"""Store records → protobuf messages (reservations, admin views)."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

from google.protobuf import timestamp_pb2
from google.protobuf.message import DecodeError, Message

from sepp.api.v1 import common_pb2 as pb
from sepp.api.v1 import worker_pb2 as wpb
from sepp.domain.ids import job_id_text
from sepp.domain.records import JobRecord
from sepp.domain.states import State
from sepp.limits import MAX_TIMESTAMP_SECONDS, MIN_TIMESTAMP_SECONDS
from sepp.wire import varint

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
    if rec.progress:
        job.progress = rec.progress
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
    if rec.result is not None:
        result = job.result
        result.data = rec.result
        result.encoding = rec.result_encoding or ""


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
    add_attempts(job.attempts, rec.attempt_entries())


def add_attempts(attempts: Any, entries: Iterable[dict[str, Any]]) -> None:
    """Append attempt ``entries`` (``records.attempt_entries``) to the repeated ``Attempt``
    field ``attempts``; a time outside the Timestamp range is left unset."""
    for entry in entries:
        attempt = attempts.add(attempt=_int32(entry["attempt"]), worker_id=entry["worker_id"],
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
    outside the Timestamp range): the caller does not hand such a job out."""
    (id_, queue, job_type, state, priority, run_at, enqueued_at, attempt, max_attempts, payload, encoding, extras,
     idem, lease_id, lease_expires_at, worker_id, _started, history, _finished, reason, cancel, _seq, node,
     _result, _result_encoding, _progress) = rec
    if not (_MIN_US <= run_at <= _MAX_US and _MIN_US <= enqueued_at <= _MAX_US):
        # A damaged row: a time no Timestamp can carry; the caller buries it.
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


# ---------------------------------------------------------------------- Reserve answer as bytes
#
# A Reserve answer of plain jobs is written as its wire bytes directly: building its
# messages (each sub-message access and field write a call into protobuf) and serializing
# them took about twice as long a job (benchmarks in docs/benchmarks.md). A reservation of a
# plain job is
#
#   reservations (1):  0x0a <len> Reservation
#   Reservation:       job (1): 0x0a <len> Job | lease_id, lease_expires_at, attempt (2..4)
#   Job:               id (1): 0x0a 0x24 <36 ASCII> | queue, job_type (2, 3)
#                      | payload (4): 0x22 <len> [data (1): 0x0a <len> <bytes>] [encoding (2)]
#                      | priority, max_attempts, attempt, state (6..9)
#                      | run_at (10), enqueued_at (11): Timestamp | the rest (12..21)
#
# written in field-number order, as protobuf writes it. Everything the jobs of one kind
# share (queue, job type, state, priority, attempts, encoding, lease, worker, node, reason,
# cancel flag) is serialized by protobuf itself, once per kind, from the message
# ``fill_reservation`` builds; only id, payload data and the two times are put in per job.
# The bytes are exactly ``SerializeToString()`` of the messages the message path builds
# (tests/unit/test_reservation_wire.py).


def _fields(message: Message, low: int, high: int) -> bytes:
    """The serialized fields of ``message`` numbered ``low`` to ``high`` (inclusive)."""
    part = type(message)()
    part.CopyFrom(message)
    for field, _value in part.ListFields():
        if not low <= field.number <= high:
            part.ClearField(field.name)
    return part.SerializeToString()


#: The varints of the numbers below 16,384 (most lengths), looked up instead of computed.
_SMALL_VARINTS = tuple(varint(n) for n in range(1 << 14))


def _length(n: int) -> bytes:
    """``n`` (≥ 0) as a varint (``_SMALL_VARINTS`` when there)."""
    return _SMALL_VARINTS[n] if n < 1 << 14 else varint(n)


class _Kind:
    """The bytes the plain jobs of one kind share (see the comment above): the job's fields
    2..3 (``names``); its encoding and fields 6..9, which follow the payload data
    (``after``); its fields 12.. and the reservation's fields 2..4, which follow the times
    (``tail``); and, memoized per (payload size, size of the times), what comes before the job
    id and between it and the payload data (``head``)."""

    __slots__ = ("after", "encoding", "heads", "names", "rest", "tail")

    def __init__(self, template: wpb.Reservation) -> None:
        job = template.job
        self.names = _fields(job, 2, 3)
        self.encoding = _fields(job.payload, 2, 2)
        self.after = self.encoding + _fields(job, 6, 9)
        self.rest = _fields(job, 12, 21)
        self.tail = self.rest + _fields(template, 2, 4)
        self.heads: dict[tuple[int, int], tuple[bytes, bytes]] = {}

    def head(self, size: int, times: int) -> tuple[bytes, bytes]:
        """(bytes before the job id, bytes between it and the payload data) of a job of this
        kind with ``size`` bytes of payload data and ``times`` bytes of run_at + enqueued_at."""
        key = (size, times)
        head = self.heads.get(key)
        if head is None:
            data_head = b"\x0a" + _length(size) if size else b""  # proto3: empty data is not written
            payload = len(data_head) + size + len(self.encoding)
            between = self.names + b"\x22" + _length(payload) + data_head
            job = 2 + 36 + len(between) + size + len(self.after) + times + len(self.rest)
            body = 1 + len(_length(job)) + job + len(self.tail) - len(self.rest)
            before = b"\x0a" + _length(body) + b"\x0a" + _length(job) + b"\x0a\x24"
            head = self.heads[key] = (before, between)
        return head


class ReservationWriter:
    """The wire bytes of one ``Reserve`` answer, built per job (``add``): ``bytes()`` is
    exactly ``SerializeToString()`` of a ``ReserveResponse`` holding what
    ``fill_reservation`` writes for each added record, in order.

    A plain job (no custom map, trace context, attempt history or idempotency key; id,
    payload and times of the types a healthy row has, the times within the Timestamp range)
    is put together from the bytes its kind shares, its id,
    payload data and times; the first job of each kind builds them from ``fill_reservation``
    itself, so a damaged shared column raises exactly as there. Any other job goes through
    ``fill_reservation`` and ``SerializeToString``. One writer per answer: kinds hold one
    call's lease."""

    __slots__ = ("_kinds", "_parts", "_times")

    def __init__(self) -> None:
        self._kinds: dict[tuple[object, ...], _Kind] = {}
        self._parts: list[bytes] = []
        #: {(run_at, enqueued_at): their fields}: the jobs of one answer mostly share them.
        self._times: dict[tuple[int, int], bytes] = {}

    def __bytes__(self) -> bytes:
        return b"".join(self._parts)

    def add(self, rec: JobRecord) -> None:
        """Append ``rec``'s reservation. Raises what ``fill_reservation`` raises for a damaged
        row (``TypeError``/``ValueError``/``OverflowError``); nothing is appended then."""
        (id_, queue, job_type, state, priority, run_at, enqueued_at, attempt, max_attempts, payload, encoding, extras,
         idem, lease_id, lease_expires_at, worker_id, _started, history, _finished, reason, cancel, _seq, node,
         _result, _result_encoding, _progress) = rec
        if (extras or history or idem or type(id_) is not bytes or len(id_) != 16 or type(payload) is not bytes
                or type(run_at) is not int or type(enqueued_at) is not int
                or not (_MIN_US <= run_at <= _MAX_US and _MIN_US <= enqueued_at <= _MAX_US)):
            res = wpb.Reservation()
            fill_reservation(res, rec)
            body = res.SerializeToString()
            self._parts.append(b"\x0a" + _length(len(body)) + body)
            return
        key = (queue, job_type, state, priority, attempt, max_attempts, encoding, lease_id, lease_expires_at,
               worker_id, node, reason, cancel)
        kind = self._kinds.get(key)
        if kind is None:
            template = wpb.Reservation()
            fill_reservation(template, rec)  # raises for a damaged shared column
            kind = self._kinds[key] = _Kind(template)
        times = self._times.get((run_at, enqueued_at))
        if times is None:
            times = self._times[(run_at, enqueued_at)] = b"\x52" + _stamp(run_at) + b"\x5a" + _stamp(enqueued_at)
        before, between = kind.head(len(payload), len(times))
        self._parts.append(b"".join((before, job_id_text(id_).encode("ascii"), between, payload, kind.after, times,
                                     kind.tail)))


def _stamp(us: int) -> bytes:
    """The length and body of a Timestamp field holding ``us`` µs (the tag is the caller's)."""
    seconds, rem = divmod(us, 1_000_000)
    body = timestamp_pb2.Timestamp(seconds=seconds, nanos=rem * 1000).SerializeToString()
    return _length(len(body)) + body
