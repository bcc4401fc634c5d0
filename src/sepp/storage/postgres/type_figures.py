"""The job-type figures of the PostgreSQL backend (shapes and rules in
``sepp.storage.type_figures``): every node adds its own counts to the shared rows in one
transaction (rows in key order: no deadlock between nodes adding the same minutes)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from sepp.storage._sql import load_queries
from sepp.storage.type_figures import TypeFiguresRead, TypeMinute, TypeRunBucket, TypeTotals, prune_steps, read_windows

if TYPE_CHECKING:
    from sepp.storage.postgres.committer import Tx
    from sepp.storage.postgres.reads import PgReads

F = load_queries("sepp.storage.postgres", "type_figures.sql")


def _storable(*texts: str) -> bool:
    """False for text PostgreSQL cannot hold (NUL): such a row is left out, not a failed flush."""
    return not any("\x00" in t for t in texts)


def _int(value: Any) -> int:
    return int(value) if value is not None else 0


def _columns(rows: Sequence[tuple[Any, ...]]) -> list[list[Any]]:
    """Rows as one array per column (the unnest parameters)."""
    return [list(c) for c in zip(*rows, strict=True)] if rows else []


async def add_type_figures(reads: PgReads, minutes: Sequence[TypeMinute], buckets: Sequence[TypeRunBucket],
                           keep_minutes_after: int, keep_hours_after: int) -> None:
    """``AdminStore.add_type_figures`` on PostgreSQL: one transaction of two multi-row upserts
    (in key order) and the prunes."""
    counts = _columns(sorted(m for m in minutes if _storable(m.queue, m.job_type)))
    runs = _columns(sorted(b for b in buckets if _storable(b.queue, b.job_type)))

    async def op(tx: Tx) -> None:
        if counts:
            await tx.conn.execute(F["add_type_counts"], *counts)
        if runs:
            await tx.conn.execute(F["add_type_runs"], *runs)
        for step, keep in prune_steps(keep_minutes_after, keep_hours_after):
            await tx.conn.execute(F["prune_type_counts"], step, keep)
            await tx.conn.execute(F["prune_type_runs"], step, keep)

    await reads.submit(op, 0)


async def type_figures(reads: PgReads, queue: str, day_minute: int, hour_minute: int) -> TypeFiguresRead:
    """``AdminStore.type_figures`` on PostgreSQL: grouped range reads of the primary keys, one
    per step (hour rows for the day, minute rows for the hour)."""
    if not _storable(queue):
        return TypeFiguresRead({}, {})

    async def read_step(step: int, since: int) -> tuple[dict[str, TypeTotals], dict[tuple[str, int], int]]:
        sums = {row[0]: TypeTotals(*(_int(v) for v in tuple(row)[1:6]))
                for row in await reads.fetch(F["type_totals"], queue, step, since)}
        runs = {(t, int(b)): _int(n) for t, b, n in await reads.fetch(F["type_buckets"], queue, step, since)}
        return sums, runs

    return await read_windows(read_step, day_minute, hour_minute)


async def delete_queue_figures(tx: Tx, queue: str) -> None:
    """Drop a deleted queue's figures (inside ``delete_queue``'s transaction)."""
    await tx.conn.execute(F["delete_queue_types"], queue)
    await tx.conn.execute(F["delete_queue_runs"], queue)
