"""The admin writes of the SQLite backend, run on the writer inside its transaction (one
writer: the state a function reads is the state it writes over): cancel, requeue and delete
one job, the bulk redrive and purge chunks, a queue's deletion and the throughput counts.
``SQLiteAdmin`` binds their arguments (``functools.partial``) and submits them; the
connection is their last argument. Module-level so they pickle (the writer may run in a
process of its own).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from typing import Any

from sepp.domain.policy import PolicyLookup
from sepp.domain.states import State
from sepp.domain.transitions import CancelAction, cancel
from sepp.storage.admin import Outcome, WriteResult, cancel_result, requeue_plan
from sepp.storage.sqlite import type_figures as figures
from sepp.storage.sqlite.dependents import propagate_failures, revive
from sepp.storage.sqlite.sql import A


def add_counts(rows: list[tuple[Any, ...]], keep_after_minute: int, conn: sqlite3.Connection) -> None:
    """Writer side of ``SQLiteAdmin.add_counts``."""
    if rows:
        conn.executemany(A["add_counts"], rows)
    conn.execute(A["prune_throughput"], (keep_after_minute,))


def cancel_job(job_id: bytes, now: int, policy: PolicyLookup, reason: str, conn: sqlite3.Connection) -> WriteResult:
    """Writer side of ``SQLiteAdmin.cancel``: applies ``transitions.cancel``."""
    row = conn.execute(A["admin_lookup"], (job_id,)).fetchone()
    if row is None:
        return WriteResult(Outcome.NOT_FOUND)
    seq, queue, state = row
    decision = cancel(state, now, policy(queue), reason)
    if decision.action is CancelAction.CANCEL:
        conn.execute(A["cancel_now"], (decision.finished_at, decision.purge_at, decision.reason, seq))
        propagate_failures(conn)  # its dependents, per their policy (docs/workflows.md)
    elif decision.action is CancelAction.REQUEST:
        conn.execute(A["request_cancel"], (seq,))
    return cancel_result(decision.action, queue, state)


def requeue_job(job_id: bytes, now: int, conn: sqlite3.Connection, revive_dependents: bool = True) -> WriteResult:
    """Writer side of ``SQLiteAdmin.requeue``: applies ``transitions.redrive`` (DEFERRED
    instead of READY for a job that still waits for dependencies) and, unless
    ``revive_dependents`` is False, revives the dependents cancelled because it failed
    (``dependents.revive``)."""
    plan = requeue_plan(conn.execute(A["admin_lookup"], (job_id,)).fetchone(), now)
    if isinstance(plan, WriteResult):
        return plan
    seq, queue, decision = plan
    conn.execute(A["requeue_one"], (decision.state, decision.attempt, decision.run_at, seq))
    if revive_dependents:
        revive(conn, [seq])
    return WriteResult(Outcome.DONE, queue, decision.state)


def delete_job(job_id: bytes, state: int | None, conn: sqlite3.Connection) -> WriteResult:
    """Writer side of ``SQLiteAdmin.delete_job`` (the one writer: the state read is the state
    deleted over)."""
    row = conn.execute(A["admin_lookup"], (job_id,)).fetchone()
    if row is None:
        return WriteResult(Outcome.NOT_FOUND)
    seq, queue, found = row
    if state is not None and found != state:
        return WriteResult(Outcome.WRONG_STATE, queue, found)
    conn.execute(A["delete_one"], (seq,))
    return WriteResult(Outcome.DONE, queue, found)


def requeue_dead(name: str, params: dict[str, Any], conn: sqlite3.Connection,
                 revive_dependents: bool = True) -> list[tuple[bytes, str, str]]:
    """Writer side of ``SQLiteAdmin.requeue_dead``: the columns of ``transitions.redrive``
    (READY at ``:now``, attempt 0) for up to ``:limit`` ``BULK_REDRIVABLE`` (DEAD_LETTERED)
    jobs, written by the statement itself (``requeue_dead_*`` in admin.sql); (job id,
    queue, job type) of each. Unless ``revive_dependents`` is False, revives the dependents
    cancelled because they failed (``dependents.revive``)."""
    rows = conn.execute(A[name], params).fetchall()
    if revive_dependents:
        revive(conn, [r[3] for r in rows])
    return [(r[0], r[1], r[2]) for r in rows]


def purge(queue: str, states: Sequence[int], limit: int, conn: sqlite3.Connection) -> int:
    """Writer side of ``SQLiteAdmin.purge``."""
    left = limit
    for state in states:
        if left <= 0:
            break
        if state == int(State.SCHEDULED):
            cur = conn.execute(A["purge_scheduled"], {"queue": queue, "limit": left})
        elif state == int(State.READY):
            cur = conn.execute(A["purge_ready"], {"queue": queue, "limit": left})
        elif state == int(State.RESERVED):
            cur = conn.execute(A["purge_reserved"], {"queue": queue, "limit": left})
        else:
            cur = conn.execute(A["purge_finished"], {"queue": queue, "state": state, "limit": left})
        left -= cur.rowcount
    return limit - left


def delete_queue(queue: str, conn: sqlite3.Connection) -> bool:
    """Writer side of ``SQLiteAdmin.delete_queue``."""
    if conn.execute(A["queue_has_jobs"], {"queue": queue}).fetchone()[0]:
        return False
    conn.execute(A["delete_queue_row"], (queue,))
    conn.execute(A["delete_queue_throughput"], (queue,))
    conn.execute(A["delete_queue_bucket"], (queue,))
    figures.delete_queue_figures(queue, conn)
    return True
