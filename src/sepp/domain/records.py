"""The rows a store keeps and reads back (STYLE habit 1).

Times are integer microseconds since the Unix epoch (UTC); job and lease ids are 16-byte
UUID blobs.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, NamedTuple

from sepp.domain.states import State
from sepp.limits import MAX_TIMESTAMP_SECONDS, MIN_TIMESTAMP_SECONDS


class JobRow(NamedTuple):
    """One validated job to store: exactly the INSERT parameters, in schema order.

    A tuple on purpose — the batched enqueue path builds hundreds of thousands per
    second and hands them straight to the driver.
    """

    id: bytes
    queue: str
    job_type: str
    state: int
    priority: int
    run_at: int
    enqueued_at: int
    max_attempts: int
    payload: bytes
    encoding: str
    extras: bytes | None
    idempotency_key: str | None


#: Deduplicated jobs of one enqueue call: row index → (original job id, its state now;
#: 0 when the original no longer exists).
Dedups = dict[int, tuple[bytes, int]]


@dataclass(frozen=True, slots=True)
class QueueRecord:
    """A persisted queue: settings as JSON text (``QueueSettings``), paused and declared flags."""

    name: str
    settings_json: str
    paused: bool
    declared: bool


class JobRecord(NamedTuple):
    """A full job row as read back (reservations, admin). Times are µs since the epoch (UTC).

    A tuple whose fields are the store's SELECT columns in order, so a reserve of
    hundreds of jobs builds its records with ``JobRecord._make(row)`` (no per-field
    Python code on the writer thread).
    """

    id: bytes
    queue: str
    job_type: str
    state: int
    priority: int
    run_at: int
    enqueued_at: int
    attempt: int
    max_attempts: int
    payload: bytes
    encoding: str
    extras: bytes | None
    idempotency_key: str | None
    lease_id: bytes | None
    lease_expires_at: int | None
    worker_id: str | None
    started_at: int | None
    history: str | None
    finished_at: int | None
    reason: str | None
    cancel_requested: int               # 0/1: an admin asked to cancel it (truth value)
    seq: int = 0
    #: The node that leased it last (``ReserveParams.node``); None if never leased
    #: or leased before the column existed.
    node: str | None = None
    #: What the handler returned, stored with the ack that completed the job (bytes, and
    #: its encoding label); None when it returned nothing or the job is not COMPLETED.
    result: bytes | None = None
    result_encoding: str | None = None
    #: The latest progress its handler reported (``Job.set_progress``): JSON text of at most
    #: ``MAX_PROGRESS_BYTES``; None when none was reported (or the read does not carry it:
    #: only ``get_job`` does).
    progress: str | None = None

    def attempt_entries(self) -> list[dict[str, Any]]:
        """The attempt history, oldest first: dicts with ``attempt``, ``worker_id``, ``node``
        (the node that leased the job for that attempt, "" when unknown),
        ``started_at``/``ended_at`` (µs UTC; started may be None), ``outcome``,
        ``error_message`` and ``error_detail``.

        The attempt that completed a job is not written to ``history`` (an ack only sets the
        state and ``finished_at``; docs/decisions.md "The completing attempt is implicit"): it
        is derived here from ``attempt``, ``worker_id``, ``node``, ``started_at`` and ``finished_at``.
        """
        return attempt_entries(self.state, self.history, self.attempt, self.worker_id, self.node, self.started_at,
                               self.finished_at)


def attempt_entries(state: int, history: str | None, attempt: int, worker_id: str | None, node: str | None,
                    started_at: int | None, finished_at: int | None) -> list[dict[str, Any]]:
    """A job's attempt history from its columns (``JobRecord.attempt_entries``, and the
    outcome a wait answers): the ``history`` entries, oldest first, and for a COMPLETED job
    the completing attempt, derived from ``attempt``, ``worker_id``, ``node``, ``started_at``
    and ``finished_at`` (µs UTC) when ``history`` does not carry it."""
    entries = _history_entries(history)
    if state == State.COMPLETED:
        last = entries[-1] if entries else None
        # Rows completed before schema 4 carry the entry already.
        if last is None or last.get("outcome") != "completed" or last.get("attempt") != attempt:
            entries.append({"attempt": attempt, "worker_id": worker_id or "", "node": node or "",
                            "started_at": started_at, "ended_at": finished_at, "outcome": "completed",
                            "error_message": "", "error_detail": ""})
    return entries


#: An attempt entry's fields and the value a missing or mistyped one reads as.
_ENTRY_DEFAULTS: dict[str, Any] = {"attempt": 0, "worker_id": "", "node": "", "started_at": None,
                                   "ended_at": None, "outcome": "", "error_message": "", "error_detail": ""}
_ENTRY_RANGE: dict[str, tuple[int, int]] = {
    "attempt": (-(2**31), 2**31 - 1),
    "started_at": (MIN_TIMESTAMP_SECONDS * 1_000_000, MAX_TIMESTAMP_SECONDS * 1_000_000 + 999_999),
    "ended_at": (MIN_TIMESTAMP_SECONDS * 1_000_000, MAX_TIMESTAMP_SECONDS * 1_000_000 + 999_999)}
_ENTRY_TYPES: dict[str, type] = {"attempt": int, "worker_id": str, "node": str, "started_at": int, "ended_at": int,
                                 "outcome": str, "error_message": str, "error_detail": str}


def _history_entries(history: Any) -> list[dict[str, Any]]:
    """A ``history`` column as attempt entries. A damaged column (not JSON, not an array,
    entries that are not objects or have fields of the wrong type) never raises: what cannot
    be read is left out or reads as the field's default (a poison row must not
    stop the reads of the others, and its own page still shows what can be read)."""
    if not history:
        return []
    try:
        data = json.loads(history)
    except (TypeError, ValueError):
        return []
    if not isinstance(data, list):
        return []
    entries = []
    for item in data:
        if not isinstance(item, dict):
            continue
        entry = dict(item)
        for key, default in _ENTRY_DEFAULTS.items():
            value = entry.get(key, default)
            kind = _ENTRY_TYPES[key]
            if value is not None and (not isinstance(value, kind) or isinstance(value, bool)):
                value = default
            if kind is int and value is not None and not _ENTRY_RANGE[key][0] <= value <= _ENTRY_RANGE[key][1]:
                value = default  # beyond a Timestamp (times) or an int32 (attempt)
            entry[key] = value
        entries.append(entry)
    return entries


class NodeRecord(NamedTuple):
    """One ``sepp serve`` process of a cluster as the store keeps it:
    ``name`` (``node_name``, default the host name), ``address`` (its gRPC listen address),
    ``version`` (sepp's), ``started_at`` and ``last_seen`` (µs UTC; ``last_seen`` moves on
    with every heartbeat, ``sepp.server.cluster.HEARTBEAT_EVERY``)."""

    name: str
    address: str
    version: str
    started_at: int
    last_seen: int


class WorkerRecord(NamedTuple):
    """One worker as one node saw it, the row a node reports to the
    store with each heartbeat: ``worker_id`` (``Reserve.worker_id``), ``node`` (the node that
    saw it), what its last Reserve said (``host``, ``queues``, ``concurrency`` — 0 when not
    said —, ``client_version``), ``first_seen`` / ``last_reserve`` / ``last_seen`` (µs UTC;
    ``last_seen`` is its last call of any kind) and the jobs it completed / nacked through
    this node in the 60 seconds before the report (``completed_minute`` / ``failed_minute``);
    ``stopped_at`` (µs UTC) when the worker's final ``StopReserving`` (a clean stop) reached this
    node after its last Reserve here, else 0."""

    worker_id: str
    node: str
    host: str
    queues: tuple[str, ...]
    concurrency: int
    client_version: str
    first_seen: int
    last_reserve: int
    last_seen: int
    completed_minute: int
    failed_minute: int
    stopped_at: int = 0


class PeriodicRecord(NamedTuple):
    """One periodic schedule as the store keeps it, shared by every
    node on the store: ``name``; ``definition`` (the schedule as JSON text, opaque here:
    ``sepp.server.periodic.spec.PeriodicSettings``); ``source`` (``"config"``: from a
    ``[[periodic]]`` table, written at each start; ``"admin"``: made by the admin API);
    ``paused``; ``active_since`` (µs UTC: created or last resumed — ticks before it are never
    caught up); ``last_tick`` (the latest tick a job was enqueued for, 0 = none yet);
    ``last_run_at`` (when the last job — a tick's or a trigger's — was enqueued, 0 = never);
    ``last_job_id`` (that job's 16-byte id, empty when none); ``last_error`` (why the last
    run enqueued nothing, empty when it did); ``updated_at`` (last change of the definition
    or the flags, µs UTC)."""

    name: str
    definition: str
    source: str
    paused: bool
    active_since: int
    last_tick: int
    last_run_at: int
    last_job_id: bytes
    last_error: str
    updated_at: int


class PeriodicRun(NamedTuple):
    """What one run of a schedule did, recorded with ``Store.record_periodic_runs``: ``name``;
    ``tick`` (the tick time it ran for, µs UTC; 0 for a manual trigger, which leaves
    ``last_tick`` alone); ``job_id`` (the job enqueued or deduplicated to, empty when none);
    ``error`` (why nothing was enqueued, empty on success); ``at`` (when, µs UTC)."""

    name: str
    tick: int
    job_id: bytes
    error: str
    at: int
