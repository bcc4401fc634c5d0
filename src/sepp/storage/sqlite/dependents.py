"""The SQLite writer's side of failed dependencies (docs/workflows.md "When a dependency
fails"): the failure policies applied to the dependents of jobs that were dead-lettered or
cancelled (``propagate_failures``), and the revival of the dependents a redrive brings back
(``revive``). Both run in the writer's transaction of the write that caused them."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable

from sepp.storage.dependencies import failure_reason
from sepp.storage.sqlite.sql import Q


def propagate_failures(conn: sqlite3.Connection) -> None:
    """Apply the failure policies of the dependents of every job that failed in this
    transaction (``dep_failed``, filled by the ``jobs_dep_failed`` trigger), level by level
    until none is left: "run" dependents lose the edge (released at their last), "cancel"
    ones still DEFERRED are CANCELLED naming the dependency (their own dependents are handled
    next: the trigger lists them), "wait" ones are left alone. One empty read when nothing
    failed. A loop, not trigger recursion: a chain of any length costs no nesting."""
    while True:
        failed = conn.execute(Q["take_failed"]).fetchall()
        if not failed:
            return
        for seq, dep_id, state, finished_at, purge_at in failed:
            args = {"seq": seq, "fin": finished_at}
            conn.execute(Q["release_run_children"], args)
            conn.execute(Q["wake_run_children"], {"seq": seq})
            conn.execute(Q["drop_run_edges"], {"seq": seq})
            conn.execute(Q["cancel_children"], {**args, "purge": purge_at,
                                                "reason": failure_reason(bytes(dep_id), state)})


def revive(conn: sqlite3.Connection, seqs: Iterable[int]) -> int:
    """Revive the dependents that were CANCELLED because one of the jobs ``seqs`` (just
    redriven) failed, and theirs in turn: each goes back to DEFERRED (READY when it waits for
    nothing), unless another of its dependencies is still DEAD_LETTERED or CANCELLED — then it
    stays CANCELLED, now naming that one (whose redrive revives it). Returns how many were
    revived."""
    frontier = list(seqs)
    revived = 0
    while frontier:
        children = [c for s in frontier for (c,) in conn.execute(Q["revivable"], {"seq": s}).fetchall()]
        frontier = []
        for child in children:
            other = conn.execute(Q["other_failed_dependency"], {"child": child}).fetchone()
            if other is not None:
                dep_seq, dep_id, dep_state, purge_at = other
                conn.execute(Q["reblame"], {"child": child, "dep": dep_seq, "purge": purge_at,
                                            "reason": failure_reason(bytes(dep_id), dep_state)})
                continue
            conn.execute(Q["revive_one"], {"child": child})
            conn.execute(Q["wake_revived"], {"child": child})  # READY now: its queue is woken
            revived += 1
            frontier.append(child)
    return revived


__all__ = ["propagate_failures", "revive"]
