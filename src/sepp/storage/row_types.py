"""The rows the drivers read, by name: one type per read whose columns both backends select
in the same order (``queries.sql`` of each driver), and the few hand-tuned builders of the
hot paths.

A driver reads a row by name through its type (``LeaseLookup._make(row).queue``). Where a
hot path reads raw rows by position for speed (reserve, settle), that read lives in ONE
function here, or indexes with positions taken from the type's field names (``at``), and a test
checks it against the by-name read for generated rows (tests/storage/test_row_types.py).
So adding a column means changing the SQL and the type, never hunting positions; a test
checks each query's column names against its type (tests/storage/test_row_columns.py).

The row types are named tuples of what the driver hands back (their fields untyped: a
damaged row may hold anything; the records built from them are typed), declared by their
column names alone so that they do not repeat the records' field lists.
"""

from __future__ import annotations

import operator
from collections import namedtuple
from collections.abc import Iterable, Sequence
from typing import Any

from sepp.domain.params import SettleResult
from sepp.domain.records import JobRecord, JobRow, QueueRecord
from sepp.domain.states import State
from sepp.domain.transitions import ExpiredLease, HeldJob

_RESERVED, _COMPLETED = int(State.RESERVED), int(State.COMPLETED)
#: Builds a NamedTuple from a full tuple without its Python-level ``__new__`` (hot paths).
_new = tuple.__new__


class LeasedRow(namedtuple("LeasedRow", "id job_type priority run_at enqueued_at attempt max_attempts payload "
                                        "encoding extras idempotency_key history seq")):
    """A job being leased (SQLite ``ready_for_lease``; PostgreSQL ``lease_ready``,
    ``lease_within`` and the flow-limited lease): ``attempt`` already counts this delivery."""

    __slots__ = ()


class AckedRow(namedtuple("AckedRow", "id queue attempt seq started_at job_type")):
    """A job a batched ack completed (``ack_many`` of PostgreSQL, ``ack_many_head`` of SQLite)."""

    __slots__ = ()


class LeaseLookup(namedtuple("LeaseLookup", "seq queue state lease_id lease_expires_at attempt max_attempts "
                                            "worker_id started_at cancel_requested run_at node job_type")):
    """The job a settle or an extend judges (``settle_lookup``): its row key, then the
    columns of ``transitions.HeldJob`` in order."""

    __slots__ = ()

    def held(self) -> HeldJob:
        """The columns the settle and extend rules judge."""
        return HeldJob._make(self[1:])


class ExpiredRow(namedtuple("ExpiredRow", "seq queue attempt max_attempts worker_id started_at lease_expires_at "
                                          "cancel_requested node id lease_id job_type")):
    """A RESERVED job whose lease ran out (``expired_leases``): its row key, the columns of
    ``transitions.ExpiredLease`` in order, then what the write and the figures need."""

    __slots__ = ()

    def lease(self) -> ExpiredLease:
        """The columns the reclaim rule judges."""
        return ExpiredLease._make(self[1:9])


class QueueRow(namedtuple("QueueRow", "name settings paused declared")):
    """A queue row (``load_queues``, ``get_queue`` / ``lock_queue``): ``paused`` and
    ``declared`` as stored (0/1 in SQLite)."""

    __slots__ = ()

    def record(self) -> QueueRecord:
        """The row as the server's ``QueueRecord``."""
        return QueueRecord(self.name, self.settings, bool(self.paused), bool(self.declared))


def at(row_type: type[tuple[Any, ...]], name: str) -> int:
    """The position of column ``name`` in rows of ``row_type`` (a NamedTuple): what a hot path
    indexes raw rows with (``PAYLOAD = at(LeasedRow, "payload")``). Raises ``ValueError``
    for a name the type does not have."""
    fields: tuple[str, ...] = row_type._fields  # type: ignore[attr-defined]
    return fields.index(name)


#: A ``JobRow``'s idempotency key, read by name in C (``any_keyed``).
_KEY_OF = operator.attrgetter("idempotency_key")


def any_keyed(rows: Iterable[JobRow]) -> bool:
    """Whether any of the enqueued ``rows`` has an idempotency key (the plain-insert test of
    every enqueue: a C-level getter mapped over the rows, faster than a generator)."""
    return any(map(_KEY_OF, rows))


def leased_records(rows: Iterable[Sequence[Any]], queue: str, lease_id: bytes, expires: int, worker: str,
                   now: int, node: str) -> list[JobRecord]:
    """The hot path of a Reserve: the ``JobRecord`` of each leased row (``LeasedRow`` columns)
    of ``queue``, leased with ``lease_id`` until ``expires`` (µs) by ``worker`` at ``now``
    (µs) on ``node``. Rows are unpacked by position and records built without
    ``JobRecord.__new__``; ``leased_record`` is the same by name."""
    reserved = _RESERVED
    return [_new(JobRecord, (id_, queue, job_type, reserved, priority, run_at, enqueued_at, attempt, max_attempts,
                             payload, encoding, extras, idem, lease_id, expires, worker, now, history, None, None, 0,
                             seq, node, None, None, None))
            for (id_, job_type, priority, run_at, enqueued_at, attempt, max_attempts, payload, encoding, extras, idem,
                 history, seq) in rows]


def leased_record(row: LeasedRow, queue: str, lease_id: bytes, expires: int, worker: str, now: int,
                  node: str) -> JobRecord:
    """``leased_records`` for one row, by name (the plain path its test compares with)."""
    return JobRecord(id=row.id, queue=queue, job_type=row.job_type, state=_RESERVED, priority=row.priority,
                     run_at=row.run_at, enqueued_at=row.enqueued_at, attempt=row.attempt,
                     max_attempts=row.max_attempts, payload=row.payload, encoding=row.encoding, extras=row.extras,
                     idempotency_key=row.idempotency_key, lease_id=lease_id, lease_expires_at=expires,
                     worker_id=worker, started_at=now, history=row.history, finished_at=None, reason=None,
                     cancel_requested=0, seq=row.seq, node=node)


def acked_results(rows: Iterable[Sequence[Any]], now: int) -> dict[bytes, SettleResult]:
    """The hot path of a batched ack: {job id: its ``SettleResult``} for the rows (``AckedRow``
    columns) of the jobs completed at ``now`` (µs). Rows are unpacked by position;
    ``acked_result`` is the same by name."""
    completed = _COMPLETED
    return {job_id: _new(SettleResult, (None, completed, now, attempt, queue, started or 0, job_type))
            for job_id, queue, attempt, _seq, started, job_type in rows}


def acked_result(row: AckedRow, now: int) -> SettleResult:
    """``acked_results`` for one row, by name (the plain path its test compares with)."""
    return SettleResult(None, state=_COMPLETED, run_at=now, attempt=row.attempt, queue=row.queue,
                        started_at=row.started_at or 0, job_type=row.job_type)
