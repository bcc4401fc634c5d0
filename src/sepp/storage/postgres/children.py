"""An ack that carries children (``sepp.domain.children``) on PostgreSQL: the children stored
in the acked job's workflow and its dependents pointed at them, in the settle's transaction,
before the statement that completes the job (docs/workflows.md "A running job extends its
workflow")."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Sequence

from sepp.domain.children import missing_dependency_message
from sepp.domain.params import Children, SettleParams
from sepp.domain.records import JobRow
from sepp.storage.dependencies import CANCEL, Found
from sepp.storage.errors import DependencyMissing, StoreError
from sepp.storage.postgres.committer import Tx
from sepp.storage.postgres.enqueue import EnqueueOp, defer, dependencies
from sepp.storage.workflows import row_found, stored_dependencies

#: Each child's seq and the children's foreign ids (``PostgresStore._seqs``).
Placed = tuple[Sequence[int], Sequence[bytes]]

#: The acked job's workflow, given $1 (16 bytes) when it has none yet: $2 its seq.
_JOIN = "UPDATE jobs SET workflow_id = coalesce(workflow_id, $1) WHERE seq = $2 RETURNING workflow_id"
#: Stamp the children (seqs $2) with workflow $1.
_STAMP = "UPDATE jobs SET workflow_id = $1 WHERE seq = ANY($2::bigint[])"
#: The acked job's dependents ($1 its seq) wait for $2 jobs more instead of it (deps_left
#: counts every edge: ``storage.dependencies``); they are locked in seq order, as a completion's
#: release locks them. Returns how many there are.
_RECOUNT = """
WITH d AS (SELECT j.seq FROM jobs j JOIN job_waits w ON j.seq = w.child_seq WHERE w.parent_seq = $1
           ORDER BY j.seq FOR UPDATE OF j)
UPDATE jobs SET deps_left = jobs.deps_left + $2 - 1 FROM d WHERE jobs.seq = d.seq
"""
#: The acked job's ($1) edges moved to the targets (seqs $2), and the targets marked: their
#: completion then releases the dependents, the acked job's none.
_MOVE = """
WITH gone AS (DELETE FROM job_waits WHERE parent_seq = $1 RETURNING child_seq),
moved AS (INSERT INTO job_waits (parent_seq, child_seq) SELECT t, gone.child_seq FROM gone, unnest($2::bigint[]) AS t
          ON CONFLICT DO NOTHING)
UPDATE jobs SET has_dependents = true WHERE seq = ANY($2::bigint[])
"""
#: Mark the jobs of seqs $1 as depended on (``storage.dependencies``).
_MARK = "UPDATE jobs SET has_dependents = true WHERE seq = ANY($1::bigint[])"


async def store_children(tx: Tx, seq: int, c: Children, placed: Placed, now: int) -> str | None:
    """Store ``c`` for the acked job ``seq`` (locked, still RESERVED: its completion follows in
    the same transaction), ``placed`` the children's seqs: the rows inserted (their queues
    woken, new queues created, custom entries written), each with the job's workflow id (the
    job takes ``c.workflow_id`` when it has none); the job's dependents re-pointed at
    ``c.targets``; then the rows' own dependencies recorded (a failed one applies its policy,
    and a target cancelled that way fails the re-pointed dependents by theirs: the trigger
    ``jobs_dep_failed``).

    Returns None when stored; the refusal message, nothing written, when a ``depends_on`` id
    is no stored job."""
    conn, rows = tx.conn, c.rows
    seqs, foreign = placed
    stored = stored_dependencies(rows, c.depends_on)
    try:
        found: dict[bytes, Found] = await dependencies(conn, stored) if stored else {}
    except DependencyMissing as exc:  # raised before it marked anything
        child, dep = min(exc.missing.items())
        return missing_dependency_message(child, dep)
    dedups = await EnqueueOp(rows, [0] * len(rows), now, c.new_queues, c.custom, seqs, foreign)(tx)
    if dedups:  # the admission refuses keyed children: nothing can be deduplicated here
        raise StoreError("a child job was deduplicated by its idempotency key")
    workflow = await conn.fetchval(_JOIN, c.workflow_id, seq)
    await conn.execute(_STAMP, workflow, list(seqs))
    targets = [seqs[t] for t in c.targets]
    status = await conn.execute(_RECOUNT, seq, len(targets))
    if status != "UPDATE 0":
        await conn.execute(_MOVE, seq, targets)
    index = {row.id: i for i, row in enumerate(rows)}
    parents = sorted({seqs[index[d]] for ids in c.depends_on.values() for d in ids if d in index})
    if parents:  # the children the callback waits for: their completion releases it
        await conn.execute(_MARK, parents)
    for row, s in zip(rows, seqs, strict=True):
        found[row.id] = Found(s, row.state, None)
    for i, ids in c.depends_on.items():  # in row order: the children before the callback
        policy = c.on_failure.get(i, CANCEL)
        await defer(conn, seqs[i], ids, found, policy, now)
        row_found(found, rows[i], seqs[i], ids, policy)
    return None


async def placed_children(items: Iterable[SettleParams],
                          seqs_of: Callable[[Sequence[JobRow]], Awaitable[Placed]]) -> dict[bytes, Placed] | None:
    """Job id → the seqs of its children (``seqs_of``: ``PostgresStore._seqs``) for each ack
    of ``items`` that carries some; None when none does (the plain settle: one test per item)."""
    placed: dict[bytes, Placed] | None = None
    for p in items:
        if p.children is not None:
            if placed is None:
                placed = {}
            placed[p.job_id] = await seqs_of(p.children.rows)
    return placed


__all__ = ["Placed", "placed_children", "store_children"]
