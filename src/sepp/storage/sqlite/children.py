"""Writer side of an ack that carries children (``sepp.domain.children``): the children stored
in the acked job's workflow and its dependents pointed at them, in the settle's transaction,
before the statement that completes the job (docs/workflows.md "A running job extends its
workflow")."""

from __future__ import annotations

import sqlite3

from sepp.domain.children import missing_dependency_message
from sepp.domain.params import Children
from sepp.storage.dependencies import CANCEL, Found, missing_of
from sepp.storage.sqlite import ops
from sepp.storage.sqlite.sql import Q
from sepp.storage.workflows import row_found, stored_dependencies

#: The acked job's workflow, given ?1 (16 bytes) when it has none yet: ?2 its seq.
_JOIN = "UPDATE jobs SET workflow_id = coalesce(workflow_id, ?1) WHERE seq = ?2 RETURNING workflow_id"
#: Stamp a child with the workflow: workflow id, job id.
_STAMP = "UPDATE jobs SET workflow_id = ? WHERE id = ?"
#: The acked job's dependents (:p its seq) wait for :k jobs more instead of it (one edge each,
#: their deps_left counting every edge: ``storage.dependencies``).
_RECOUNT = ("UPDATE jobs SET deps_left = deps_left + :k - 1 "
            "WHERE seq IN (SELECT child_seq FROM job_waits WHERE parent_seq = :p)")
#: The edges of the acked job (:p) copied to a target (:t) of its children.
_COPY = ("INSERT OR IGNORE INTO job_waits (parent_seq, child_seq) "
         "SELECT :t, child_seq FROM job_waits WHERE parent_seq = :p")
#: The acked job's own edges, gone: its completion then releases none of its dependents.
_DROP = "DELETE FROM job_waits WHERE parent_seq = :p"


def store_children(conn: sqlite3.Connection, seq: int, c: Children, now: int) -> str | None:
    """Store ``c`` for the acked job ``seq`` (still RESERVED: its completion follows in the
    same transaction): the rows inserted with their custom entries and new queues, each with
    the job's workflow id (the job takes ``c.workflow_id`` when it has none); the job's
    dependents re-pointed at ``c.targets`` (``repoint``); then the rows' own dependencies
    recorded (a failed one applies its policy, and a target cancelled that way fails the
    re-pointed dependents by theirs: the trigger ``jobs_dep_failed`` lists it).

    Returns None when stored; the refusal message, nothing written, when a ``depends_on`` id
    is no stored job."""
    rows = c.rows
    stored = stored_dependencies(rows, c.depends_on)
    found = ops.stored_found(conn, stored)
    missing = missing_of(stored, found)
    if missing:
        child, dep = min(missing.items())
        return missing_dependency_message(child, dep)
    ops.enqueue_op(rows, [0] * len(rows), now, c.new_queues, c.custom, conn)
    workflow = conn.execute(_JOIN, (c.workflow_id, seq)).fetchone()[0]
    conn.executemany(_STAMP, [(workflow, row.id) for row in rows])
    seqs = [conn.execute(Q["job_seq"], (row.id,)).fetchone()[0] for row in rows]
    repoint(conn, seq, [seqs[t] for t in c.targets])
    for row, s in zip(rows, seqs, strict=True):
        found[row.id] = Found(s, row.state, None)
    for i, ids in c.depends_on.items():  # in row order: the children before the callback
        policy = c.on_failure.get(i, CANCEL)
        ops.defer(conn, rows[i].id, ids, found, policy, now)
        row_found(found, rows[i], seqs[i], ids, policy)
    return None


def repoint(conn: sqlite3.Connection, seq: int, targets: list[int]) -> None:
    """Make every dependent of job ``seq`` wait for the jobs ``targets`` (seqs, at least one)
    instead of it: an edge from each target, ``deps_left`` grown by one less than their
    number, the job's own edges deleted, the targets marked ``has_dependents``. Nothing when
    the job has no dependents (one statement)."""
    args = {"p": seq, "k": len(targets)}
    if not conn.execute(_RECOUNT, args).rowcount:
        return
    for t in targets:
        conn.execute(_COPY, {"p": seq, "t": t})
        conn.execute(Q["mark_dependency"], (t,))
    conn.execute(_DROP, args)


__all__ = ["repoint", "store_children"]
