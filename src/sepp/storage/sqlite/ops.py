"""The write operations of the SQLite backend (enqueue, reserve, settle, extend), run on the
writer connection inside the committer's transaction; the sweeps are in ``sweeps``.

What a settle does to a job is decided by ``sepp.domain.transitions``; these functions read
the rows it judges and apply its ``Decision`` under the lease guard (``settle_update``:
``WHERE seq = ? AND lease_id IS ? AND state = RESERVED``). The random jitter of a backoff
is drawn here and handed to the rule.

Module-level so they pickle (the writer may run in its own process, ``writer_process``);
the connection comes last (``functools.partial`` binds the rest). They run SQL only; the
statements are prepared and the results built on the event loop where that is cheaper
(docs/decisions.md "The writer runs SQL, the event loop builds").
"""

from __future__ import annotations

import random
import sqlite3
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from sepp.domain.children import refused_children
from sepp.domain.clock import Clock
from sepp.domain.params import (
    DAMAGED_ROW,
    Children,
    ExtendResult,
    ReserveParams,
    SettleKind,
    SettleParams,
    SettleResult,
    SweepResult,
    granted_expiry,
)
from sepp.domain.policy import PolicyLookup
from sepp.domain.records import Dedups, JobRow, QueueRecord
from sepp.domain.states import State
from sepp.domain.transitions import Decision, completed_purge_at, lease_error, nack, needs_jitter, settle
from sepp.quoting import clip
from sepp.storage.dependencies import CANCEL, DependsOn, Found, OnFailure, failure_reason, missing_of, packed, plan
from sepp.storage.errors import DependencyMissing, StoreError
from sepp.storage.row_types import AckedRow, LeasedRow, LeaseLookup, at
from sepp.storage.rows import LenientText, describe, is_decode_error, note_damaged
from sepp.storage.search import CustomEntry
from sepp.storage.sqlite import flow
from sepp.storage.sqlite.dependents import propagate_failures
from sepp.storage.sqlite.sql import (
    InsertKey,
    Q,
    ack_results_sql,
    ack_sql,
    blob_slices,
    insert_sql,
    insert_statements,
)
from sepp.storage.sqlite.sweeps import promote

_ID, _PAYLOAD, _HISTORY, _SEQ = (at(LeasedRow, "id"), at(LeasedRow, "payload"), at(LeasedRow, "history"),
                                 at(LeasedRow, "seq"))
#: Positions in a one-row insert's parameters (a ``JobRow``'s fields).
_ROW_ID, _ROW_PAYLOAD = at(JobRow, "id"), at(JobRow, "payload")
_ACKED_ID, _ACKED_QUEUE, _ACKED_SEQ = at(AckedRow, "id"), at(AckedRow, "queue"), at(AckedRow, "seq")
_COMPLETED = int(State.COMPLETED)
T = TypeVar("T")

# ---------------------------------------------------------------------- enqueue


def run_inserts(statements: list[tuple[InsertKey | None, Sequence[object]]], conn: sqlite3.Connection) -> Dedups:
    """Run prepared inserts (``sql.insert_statements``); the empty dedup map of a plain insert.
    Ids and payloads are bound as ``bytearray`` (``sql.blob_slices``: the same BLOBs, without
    the driver's per-value adapter lookup for ``bytes``)."""
    for key, params in statements:
        if key is None:
            one: list[Any] = list(params)
            one[_ROW_ID], one[_ROW_PAYLOAD] = bytearray(one[_ROW_ID]), bytearray(one[_ROW_PAYLOAD])
            conn.execute(Q["insert_job"], one)
            continue
        blobs: list[Any] = list(params)
        for start, stop in blob_slices(key):
            blobs[start:stop] = map(bytearray, blobs[start:stop])
        conn.execute(insert_sql(*key), blobs)
    return {}


def insert_jobs(conn: sqlite3.Connection, rows: Sequence[JobRow]) -> None:
    """Insert ``rows`` (see ``sql.insert_statements``)."""
    run_inserts(insert_statements(rows), conn)


def enqueue_op(rows: Sequence[JobRow], dedup_until: Sequence[int], now: int, new_queues: Sequence[QueueRecord],
               custom: Sequence[CustomEntry], conn: sqlite3.Connection, depends_on: DependsOn | None = None,
               on_failure: OnFailure | None = None) -> Dedups:
    """Writer side of ``SQLiteStore.enqueue`` with idempotency keys, new queues, custom-index
    entries (``custom``: those of every row; a deduplicated row's are not written) or
    dependencies (``depends_on``, ``storage.dependencies``: looked up before anything is
    written; ``DependencyMissing`` when one is no stored job; ``on_failure``: row index → its
    policy, ``storage.dependencies``)."""
    states: dict[bytes, Found] = {}
    if depends_on:
        states = stored_found(conn, depends_on)
        missing = missing_of(depends_on, states)
        if missing:
            raise DependencyMissing(missing)
    for q in new_queues:
        conn.execute(Q["insert_queue_if_absent"],
                     (q.name, q.settings_json, int(q.paused), int(q.declared), now, now))
    dedups: Dedups = {}
    fresh: list[JobRow] = []
    for i, row in enumerate(rows):
        key = row.idempotency_key
        if key:
            hit = conn.execute(Q["find_idempotency"], (row.queue, key)).fetchone()
            if hit is not None and hit[1] > now:
                original = hit[0]
                state_row = conn.execute(Q["job_state"], (original,)).fetchone()
                if state_row is not None:
                    state = state_row[0]
                else:  # an earlier row of this call (not inserted yet), or purged: key stays claimed
                    state = next((r.state for r in fresh if r.id == original), 0)
                dedups[i] = (original, state)
                continue
            conn.execute(Q["claim_idempotency"], (row.queue, key, row.id, dedup_until[i]))
        fresh.append(row)
    insert_jobs(conn, fresh)
    if depends_on:
        for i, ids in depends_on.items():
            if i not in dedups:
                defer(conn, rows[i].id, ids, states, (on_failure or {}).get(i, CANCEL), now)
    if custom:
        if dedups:
            gone = {rows[i].id for i in dedups}
            custom = [e for e in custom if e[0] not in gone]
        conn.executemany(Q["insert_custom"], custom)
    return dedups


def stored_found(conn: sqlite3.Connection, depends_on: DependsOn) -> dict[bytes, Found]:
    """{id: what ``dependencies.plan`` reads of it} for each id of ``depends_on`` that is a
    stored job (one ``dep_lookup`` per distinct id); an id of no job is left out
    (``missing_of`` names it)."""
    found: dict[bytes, Found] = {}
    for ids in depends_on.values():
        for dep in ids:
            if dep not in found:
                hit = conn.execute(Q["dep_lookup"], (dep,)).fetchone()
                if hit is not None:
                    found[dep] = Found(*hit)
    return found


def defer(conn: sqlite3.Connection, job_id: bytes, ids: Sequence[bytes], states: dict[bytes, Found],
          policy: int, now: int, workflow_id: bytes | None = None) -> int:
    """Record the dependencies ``ids`` of the job ``job_id`` just inserted (``states``: each
    id's lookup) with its failure ``policy``: DEFERRED with its count of unfinished ones, one
    edge per unfinished one (``dependencies.plan``); with "cancel" and a dependency failed
    already, CANCELLED naming it at ``now``, kept as long as that dependency. ``workflow_id``
    (16 bytes): the workflow it joins, stamped by the same statement (None: left as it is).
    Returns the job's seq."""
    waits, failed = plan(ids, states, policy)
    seq: int = conn.execute(Q["defer_job"], (job_id, len(waits), packed(ids), workflow_id)).fetchone()[0]
    if policy != CANCEL:
        conn.execute(Q["set_dep_policy"], (seq, policy))
    for parent in waits:
        conn.execute(Q["mark_dependency"], (parent,))
        conn.execute(Q["insert_wait"], (parent, seq))
    if failed is not None:
        dep, found = failed
        conn.execute(Q["cancel_at_enqueue"], (seq, now, found.purge_at, failure_reason(dep, found.state), found.seq))
    return seq


def drain_wakes(conn: sqlite3.Connection) -> list[str]:
    """The queues the releases of this transaction made jobs READY in (``jobs_release``), once
    each; the list is emptied."""
    return sorted({r[0] for r in conn.execute(Q["drain_wakes"])})


def with_wakes(op: Callable[[sqlite3.Connection], T], conn: sqlite3.Connection) -> tuple[T, list[str]]:
    """Run the settle (or sweep, or admin) ``op``, then the failure policies of what it
    dead-lettered or cancelled (``propagate_failures``); its value and the queues its
    completions and releases made dependents READY in (``drain_wakes``), from the same
    transaction."""
    value = op(conn)
    propagate_failures(conn)
    return value, drain_wakes(conn)


def fetch_all(sql: str, params: Sequence[Any], conn: sqlite3.Connection) -> list[Any]:
    """Run one statement; its rows."""
    return conn.execute(sql, params).fetchall()


def execute(sql: str, params: Sequence[Any], conn: sqlite3.Connection) -> None:
    """Run one statement."""
    conn.execute(sql, params)


def write_queue_if(name: str, seen: Sequence[Any] | None, new: Sequence[Any], now: int,
                   conn: sqlite3.Connection) -> Sequence[Any] | None:
    """Writer side of ``SQLiteStore.change_queue``: write ``new`` (settings, paused,
    declared) as queue ``name``'s row when the stored row is still ``seen`` (settings,
    paused, declared; None = no row). Returns None when written, else the row as stored
    now (name, settings, paused, declared; None = no row), nothing written."""
    if seen is None:
        if conn.execute(Q["insert_queue_if_absent"], (name, *new, now, now)).rowcount:
            return None
    elif conn.execute(Q["update_queue_if"], (name, *new, now, *seen)).rowcount:
        return None
    current: Sequence[Any] | None = conn.execute(Q["get_queue"], (name,)).fetchone()
    return current


# ---------------------------------------------------------------------- reserve


def reserve_op(params: ReserveParams, lease_id: bytes, conn: sqlite3.Connection
               ) -> tuple[list[tuple[str, int, list[Any]]], SweepResult, int]:
    """Writer side of ``SQLiteStore.reserve``: SQL only; the records are built by the caller
    (docs/decisions.md "The writer runs SQL, the event loop builds"). Per queue with jobs:
    (queue, lease expiry µs, the ready_for_lease rows); what the promotion made READY
    (``Store.on_promoted``; due at the grant time); and the grant time (µs): ``params.grant_time()``
    read here, inside the transaction, once every write queued before it has committed —
    the leases run from it, not from when the call was made (docs/decisions.md "A lease
    runs from when it is granted").

    A row the driver cannot read (a text column that is not UTF-8) or whose payload/history
    is not bytes/text (a damaged row, ``storage.rows``) is not leased: it is dead-lettered
    with ``DAMAGED_ROW`` in the same transaction and the next rows are taken instead.
    That check runs only after the plain read failed, off the hot path."""
    now = params.grant_time()
    promoted = promote(conn, now, 10_000)  # a row it skips is reported by the sweep
    out: list[tuple[str, int, list[Any]]] = []
    want = params.max_jobs
    budget, used = params.max_bytes, 0
    for queue in params.queues:
        if want <= 0 or (budget and used >= budget):
            break
        limits = params.flow.get(queue)
        take, bucket, held = (want, None, 0) if limits is None else flow.room(conn, queue, limits, want, now)
        if take <= 0:
            continue  # a flow limit holds the queue's jobs back: fewer jobs, no error
        by_key = limits is not None and flow.may_bind_per_key(limits, held, take)
        for _round in range(_DAMAGED_ROUNDS):
            try:
                if by_key:
                    assert limits is not None
                    rows, size = flow.key_rows(conn, queue, limits, take, budget, used, bool(out))
                else:
                    rows, size = _ready_rows(conn.execute(Q["ready_for_lease"], (queue, take)), budget, used,
                                             bool(out))
                break
            except (sqlite3.OperationalError, TypeError) as exc:
                if isinstance(exc, sqlite3.OperationalError) and not is_decode_error(exc):
                    raise
                _bury_damaged_ready(conn, queue, take, now)  # then read the queue again
        else:
            continue  # a queue full of damaged rows: the next Reserve buries more
        if not rows:
            continue
        used += size
        expires = now + params.lease_for[queue]
        if by_key:
            leased = flow.lease_rows(conn, rows, lease_id, expires, params.worker_id, now, params.node)
        else:
            leased = conn.execute(Q["lease_ready"], (lease_id, expires, params.worker_id, now, queue, len(rows),
                                                      params.node)).rowcount
        if leased != len(rows):  # cannot happen with one writer; never hand out an unleased job
            raise StoreError(f"reserve leased {leased} of {len(rows)} selected jobs")
        if bucket is not None:
            flow.spend(conn, queue, bucket, len(rows))
        out.append((queue, expires, rows))
        want -= len(rows)
    return out, promoted, now


#: Times a Reserve re-reads one queue after dead-lettering damaged rows at its head.
_DAMAGED_ROUNDS = 4


def _ready_rows(cur: sqlite3.Cursor, budget: int, used: int, have: bool) -> tuple[list[Any], int]:
    """The ready_for_lease rows to lease and their size in bytes: with a ``budget``, rows
    are read one at a time and past it at most one more job is loaded (the first job of the
    call, ``have`` False, is always taken)."""
    if not budget:
        return cur.fetchall(), 0
    rows: list[Any] = []
    size = 0
    payload, history = _PAYLOAD, _HISTORY
    for row in cur:
        n = len(row[payload]) + len(row[history] or "")
        if used + size + n > budget and (rows or have):
            break
        rows.append(row)
        size += n
    cur.close()
    return rows, size


def _bury_damaged_ready(conn: sqlite3.Connection, queue: str, want: int, now: int) -> None:
    """Dead-letter (``DAMAGED_ROW``) the damaged rows among the next ``want`` READY jobs of
    ``queue``: text that is not UTF-8, a payload that is not bytes, a history that is not
    text. Each is logged (once per job)."""
    decoder = LenientText()
    saved = conn.text_factory
    conn.text_factory = decoder
    try:
        cur = conn.execute(Q["ready_for_lease"], (queue, want))
        damaged: list[tuple[Any, str]] = []
        while True:
            before = decoder.damaged
            row = cur.fetchone()
            if row is None:
                break
            if decoder.damaged != before:
                damaged.append((row, "a text column is not UTF-8"))
            elif not isinstance(row[_PAYLOAD], bytes) or not isinstance(row[_HISTORY], str | None):
                damaged.append((row, "its payload or history has the wrong type"))
    finally:
        conn.text_factory = saved
    for row, why in damaged:
        conn.execute(Q["bury_damaged"], (now, DAMAGED_ROW, row[_SEQ]))
        note_damaged(row[_ID] if isinstance(row[_ID], bytes) else row[_SEQ],
                     f"job {describe(row)} in queue {clip(repr(queue), 200)} cannot be delivered ({why}): "
                     f"dead-lettered with {DAMAGED_ROW}")


def bury_leased_op(leases: list[tuple[bytes, bytes]], now: int, conn: sqlite3.Connection) -> int:
    """Writer side of ``SQLiteStore.reserve_damaged``."""
    return sum(conn.execute(Q["bury_leased"], (now, DAMAGED_ROW, job_id, lease_id)).rowcount
               for job_id, lease_id in leases)


# ---------------------------------------------------------------------- settle and extend


def _lookup(conn: sqlite3.Connection, job_id: bytes) -> LeaseLookup | None:
    """The ``settle_lookup`` row of the job, or None."""
    row = conn.execute(Q["settle_lookup"], (job_id,)).fetchone()
    return None if row is None else LeaseLookup._make(row)


def _apply(conn: sqlite3.Connection, seq: int, lease_id: bytes, d: Decision, p: SettleParams) -> None:
    """Write ``d`` to the job ``seq`` under its lease guard (still RESERVED by ``lease_id``);
    an ack's decision writes the result of ``p`` (the item judged) with the completion."""
    if d.entry is None:  # an ack: the one-job form of the batched ack statement
        result = p.result
        cur = conn.execute(Q["complete_one"], (d.finished_at, d.purge_at, seq, lease_id, result,
                                               None if result is None else p.result_encoding))
    else:
        cur = conn.execute(Q["settle_update"], (*d[:6], d.entry, seq, lease_id))
    if cur.rowcount != 1:  # cannot happen with one writer: the lease was judged in this transaction
        raise StoreError(f"settle of job seq {seq} found its lease gone")


#: Stores an ack's children before its completion (``children.store_children``): given the
#: connection, the job's seq, the children and the time; None when stored, else why not.
ChildWriter = Callable[[sqlite3.Connection, int, Children, int], "str | None"]


def settle_one(conn: sqlite3.Connection, p: SettleParams, policy: PolicyLookup,
               children: ChildWriter | None = None) -> SettleResult:
    """Judge and apply one ack or nack (``transitions.settle``). An ack with children stores
    them first through ``children`` (the store passes ``children.store_children`` whenever an
    item may carry some), or fails the attempt when they are refused."""
    row = _lookup(conn, p.job_id)
    rand = random.uniform(-1.0, 1.0) if needs_jitter(p) else 0.0
    verdict = settle(None if row is None else row.held(), p, policy, rand)
    if isinstance(verdict, SettleResult):
        return verdict
    assert row is not None
    if p.children is not None and verdict.entry is None:  # an ack with children, about to complete
        assert children is not None
        refusal = children(conn, row.seq, p.children, p.now)
        if refusal is not None:  # nothing stored: the attempt fails instead
            verdict = nack(row.held(), refused_children(p, refusal), policy(row.queue), rand)
    _apply(conn, row.seq, p.lease_id, verdict, p)
    return verdict.result(row.queue, row.started_at, row.job_type)


def settle_each(items: Sequence[SettleParams], policy: PolicyLookup, conn: sqlite3.Connection,
                children: ChildWriter | None = None) -> list[SettleResult]:
    """Apply settle items one by one, in request order (``children``: see ``settle_one``)."""
    return [settle_one(conn, p, policy, children) for p in items]


def ack_many(statements: list[list[object]], others: dict[int, SettleParams], now: int, default_keep: int,
             policy: PolicyLookup, conn: sqlite3.Connection, results: bool = False,
             children: ChildWriter | None = None
             ) -> tuple[list[Any], dict[bytes, SettleResult], dict[int, SettleResult]]:
    """Writer side of a batched settle, one transaction: run the ack statements (the
    parameters of ``ack_many_head``: now, default retention, then one (job id, lease id)
    pair per ack: the rule ``transitions.ack`` for many jobs; with ``results``, those of
    ``ack_many_results_head``: (job id, lease id, result, encoding) per ack, each result
    written by the statement that completes its job); give the jobs of a queue with
    its own completed retention their purge time; apply each ack the statements did not
    complete (refused or repeated) and each of ``others`` (nacks, acks with children:
    ``children`` as for ``settle_one``; by item index) one by one.

    Returns the rows of the completed jobs (``AckedRow`` columns), {job id: result} of the
    acks applied one by one, and {item index: result} of ``others``."""
    rows: list[Any] = []
    width = 4 if results else 2  # parameters per ack
    for params in statements:
        n = (len(params) - 2) // width
        rows += conn.execute(ack_results_sql(n) if results else ack_sql(n), params).fetchall()
    for queue in {row[_ACKED_QUEUE] for row in rows}:
        pol = policy(queue)
        if pol.completed_retention != default_keep:
            purge_at = completed_purge_at(now, pol)
            for row in rows:
                if row[_ACKED_QUEUE] == queue:
                    conn.execute(Q["set_purge_at"], (purge_at, row[_ACKED_SEQ]))
    refused: dict[bytes, SettleResult] = {}
    if len(rows) < sum((len(params) - 2) // width for params in statements):
        # A row per completed ack (the ids are unique): fewer rows, so some acks did not complete.
        acked = {row[_ACKED_ID] for row in rows}
        ack = SettleKind.ACK
        for params in statements:
            for k in range(2, len(params), width):
                job_id, lease_id = params[k], params[k + 1]
                if job_id not in acked:
                    assert isinstance(job_id, bytes) and isinstance(lease_id, bytes)
                    result, encoding = (params[k + 2], params[k + 3]) if results else (None, "")
                    item = SettleParams(job_id, lease_id, ack, now, outcome="completed",
                                        result=result,  # type: ignore[arg-type]
                                        result_encoding=encoding or "")  # type: ignore[arg-type]
                    refused[job_id] = settle_one(conn, item, policy)
    return rows, refused, {i: settle_one(conn, p, policy, children) for i, p in others.items()}


def extend_op(job_id: bytes, lease_id: bytes, now: int, expires_at: int, clock: Clock | None,
              progress: str | None, conn: sqlite3.Connection) -> ExtendResult:
    """Writer side of ``SQLiteStore.extend``: push a live lease's expiry to ``expires_at`` (µs),
    moved on by the time the operation waited for the writer when there is a ``clock``
    (``params.granted_expiry``, read here); ``progress`` (not None) is stored with it."""
    row = _lookup(conn, job_id)
    job = None if row is None else row.held()
    err = lease_error(job, lease_id, now)
    if err is not None:
        return ExtendResult(err)
    assert job is not None and row is not None
    expires_at = granted_expiry(now, expires_at, clock)
    if progress is None:
        conn.execute(Q["extend_lease"], (expires_at, row.seq))
    else:
        conn.execute(Q["extend_lease_progress"], (expires_at, progress, row.seq))
    return ExtendResult(None, expires_at, bool(job.cancel_requested), row.queue, row.job_type, job.attempt)
