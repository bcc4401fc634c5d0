"""The admin writes of the PostgreSQL backend, each run by the committer inside a group
transaction (``committer.Tx``): cancel, requeue and delete one job, the bulk redrive and
purge chunks, a queue's deletion and the throughput counts. ``PostgresAdmin`` binds their
arguments (``functools.partial``) and submits them; the transaction is their last argument.

Several nodes share the database, so each is safe against a reserve, settle or sweep
running on another node at the same moment: a single job's row is locked while judged
(``FOR UPDATE``) and written under a guard on the state judged; the bulk chunks take their
rows through ``FOR UPDATE SKIP LOCKED`` subselects (a row another transaction holds is left
for a later chunk); counts are added to the stored ones, never replace them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sepp.domain.policy import PolicyLookup
from sepp.domain.states import State
from sepp.domain.transitions import CancelAction, Redrive, cancel
from sepp.storage.admin import Outcome, WriteResult, cancel_result, requeue_plan
from sepp.storage.postgres import type_figures as figures
from sepp.storage.postgres.committer import Tx
from sepp.storage.postgres.flow import forget as forget_flow_bound
from sepp.storage.postgres.sql import A, rowcount

_READY = int(State.READY)


async def cancel_job(job_id: bytes, now: int, policy: PolicyLookup, reason: str, tx: Tx) -> WriteResult:
    """``PostgresAdmin.cancel``: ``transitions.cancel`` applied to the row locked while judged."""
    row = await tx.conn.fetchrow(A["admin_lookup"], job_id)
    if row is None:
        return WriteResult(Outcome.NOT_FOUND)
    seq, queue, state = row
    decision = cancel(state, now, policy(queue), reason)
    if decision.action is CancelAction.CANCEL:
        await tx.conn.execute(A["cancel_now"], decision.finished_at, decision.purge_at, decision.reason, seq)
    elif decision.action is CancelAction.REQUEST:
        await tx.conn.execute(A["request_cancel"], seq)
    return cancel_result(decision.action, queue, state)


async def requeue_job(job_id: bytes, now: int, revive_dependents: bool, tx: Tx) -> WriteResult:
    """``PostgresAdmin.requeue``: ``transitions.redrive`` applied to the row locked while
    judged (DEFERRED for a job still waiting for dependencies); the queue's long-pollers on
    every node are woken. With ``revive_dependents``, the dependents cancelled because it
    failed wait again (``revive``)."""
    plan = requeue_plan(await tx.conn.fetchrow(A["admin_lookup"], job_id), now)
    if isinstance(plan, WriteResult):
        return plan
    seq, queue, decision = plan
    await tx.conn.execute(A["requeue_one"], decision.state, decision.attempt, decision.run_at, seq)
    if decision.state == _READY:
        tx.wake(queue)
    if revive_dependents:
        await revive([seq], tx)
    return WriteResult(Outcome.DONE, queue, decision.state)


async def revive(seqs: Sequence[int], tx: Tx) -> int:
    """Revive the dependents CANCELLED because one of the jobs ``seqs`` (just redriven)
    failed, and theirs in turn: each goes back to DEFERRED (READY, its queue woken, when it
    waits for nothing), unless another of its dependencies is still DEAD_LETTERED or
    CANCELLED — then it stays CANCELLED, now naming that one. Returns how many were revived
    (docs/workflows.md "Redrive revives the dependents")."""
    conn = tx.conn
    frontier = list(seqs)
    revived = 0
    while frontier:
        children = [r[0] for s in frontier for r in await conn.fetch(A["revivable"], s)]
        frontier = []
        for child in children:
            other = await conn.fetchrow(A["other_failed_dependency"], child)
            if other is not None:
                await conn.execute(A["reblame"], child, other[0], other[1], other[2])
                continue
            row = await conn.fetchrow(A["revive_one"], child)
            if row is not None:
                revived += 1
                frontier.append(child)
                if row[1] == _READY:
                    tx.wake(row[0])
    return revived


async def delete_job(job_id: bytes, state: int | None, tx: Tx) -> WriteResult:
    """``PostgresAdmin.delete_job``: one statement (a concurrent writer of the row is waited
    for, and the state is judged on the row it left)."""
    if state is None:
        row = await tx.conn.fetchrow(A["delete_one"], job_id)
    else:
        row = await tx.conn.fetchrow(A["delete_one_in_state"], job_id, state)
        if row is None:  # gone, or in another state
            found = await tx.conn.fetchrow(A["admin_lookup"], job_id)
            if found is not None:
                _seq, queue, now_state = found
                return WriteResult(Outcome.WRONG_STATE, queue, now_state)
    if row is None:
        return WriteResult(Outcome.NOT_FOUND)
    queue, was = row
    return WriteResult(Outcome.DONE, queue, was)


async def requeue_dead(decision: Redrive, sql: str, args: Sequence[Any], revive_dependents: bool,
                       tx: Tx) -> list[tuple[bytes, str, str]]:
    """One chunk of ``PostgresAdmin.requeue_dead``: the statement ``sql`` (``requeue_dead_*``)
    with ``args`` writes ``decision``'s columns; returns (job id, queue, job type) of each
    job and wakes their queues' long-pollers when the jobs went READY. With
    ``revive_dependents``, their dependents cancelled because they failed wait again (``revive``)."""
    found = await tx.conn.fetch(sql, *args)
    rows = [(bytes(job_id), queue, job_type) for job_id, queue, job_type, _seq in found]
    if revive_dependents:
        await revive([r[3] for r in found], tx)
    if decision.state == _READY:
        for queue in {row[1] for row in rows}:
            tx.wake(queue)
    return rows


async def purge(queue: str, states: Sequence[int], limit: int, tx: Tx) -> int:
    """``PostgresAdmin.purge``: up to ``limit`` of the queue's jobs in ``states`` (in that
    order) deleted; rows another transaction holds are skipped. Returns how many."""
    left = limit
    for state in states:
        if left <= 0:
            break
        if state == int(State.SCHEDULED):
            status = await tx.conn.execute(A["purge_scheduled"], queue, left)
        elif state == _READY:
            status = await tx.conn.execute(A["purge_ready"], queue, left)
        elif state == int(State.RESERVED):
            status = await tx.conn.execute(A["purge_reserved"], queue, left)
        else:
            status = await tx.conn.execute(A["purge_finished"], queue, left, state)
        left -= rowcount(status)
    return limit - left


async def delete_queue(queue: str, tx: Tx) -> bool:
    """``PostgresAdmin.delete_queue``: the queue row locked while judged; False while it
    holds a job, else the row, its throughput, bucket, flow bound and figures deleted and
    the other nodes told (they forget it: ``QueueRegistry.refresh``)."""
    await tx.conn.execute(A["lock_queue_row"], queue)
    if await tx.conn.fetchval(A["queue_has_jobs"], queue):
        return False
    await tx.conn.execute(A["delete_queue_row"], queue)
    await tx.conn.execute(A["delete_queue_throughput"], queue)
    await tx.conn.execute(A["delete_queue_bucket"], queue)
    await forget_flow_bound(tx.conn, queue)  # a queue of that name made again starts without it
    await figures.delete_queue_figures(tx, queue)
    tx.queues_changed()
    return True


async def add_counts(columns: list[list[Any]], keep_after_minute: int, tx: Tx) -> None:
    """``PostgresAdmin.add_counts``: the counts (one list per column: queue, minute,
    enqueued, completed, dead-lettered; rows in key order) added to the stored ones, then
    the rows older than ``keep_after_minute`` dropped."""
    if columns:
        await tx.conn.execute(A["add_counts"], *columns)
    await tx.conn.execute(A["prune_throughput"], keep_after_minute)
