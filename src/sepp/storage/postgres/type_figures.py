"""The job-type figures of the PostgreSQL backend (issue 13 item 2; shapes and rules in
``sepp.storage.type_figures``): every node adds its own counts to the shared rows in one
transaction (rows in key order: no deadlock between nodes adding the same minutes)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from sepp.storage._sql import load_queries
from sepp.storage.type_figures import TypeFiguresRead, TypeMinute, TypeRunBucket, TypeTotals

if TYPE_CHECKING:
    from sepp.storage.postgres.committer import Tx
    from sepp.storage.postgres.store import PostgresStore

F = load_queries("sepp.storage.postgres", "type_figures.sql")


def _storable(*texts: str) -> bool:
    """False for text PostgreSQL cannot hold (NUL): such a row is left out, not a failed flush."""
    return not any("\x00" in t for t in texts)


def _int(value: Any) -> int:
    return int(value) if value is not None else 0


def _columns(rows: Sequence[tuple[Any, ...]]) -> list[list[Any]]:
    """Rows as one array per column (the unnest parameters), in key order."""
    return [list(c) for c in zip(*rows, strict=True)] if rows else []


async def add_type_figures(store: PostgresStore, minutes: Sequence[TypeMinute], buckets: Sequence[TypeRunBucket],
                           keep_after_minute: int) -> None:
    """``AdminStore.add_type_figures`` on PostgreSQL: one transaction of two multi-row upserts
    and the prune."""
    counts = _columns(sorted(m for m in minutes if _storable(m.queue, m.job_type)))
    runs = _columns(sorted(b for b in buckets if _storable(b.queue, b.job_type)))

    async def op(tx: Tx) -> None:
        if counts:
            await tx.conn.execute(F["add_type_counts"], *counts)
        if runs:
            await tx.conn.execute(F["add_type_runs"], *runs)
        await tx.conn.execute(F["prune_type_counts"], keep_after_minute)
        await tx.conn.execute(F["prune_type_runs"], keep_after_minute)

    await store._committer.submit(op, 0)


async def type_figures(store: PostgresStore, queue: str, day_minute: int, hour_minute: int) -> TypeFiguresRead:
    """``AdminStore.type_figures`` on PostgreSQL: two grouped range reads of the primary keys."""
    if not _storable(queue):
        return TypeFiguresRead({}, {})
    totals: dict[str, tuple[TypeTotals, TypeTotals]] = {}
    for row in await store._fetch(F["type_totals"], queue, day_minute, hour_minute):
        values = [_int(v) for v in tuple(row)[1:]]
        totals[row[0]] = (TypeTotals(*values[:5]), TypeTotals(*values[5:]))
    buckets: dict[str, dict[int, tuple[int, int]]] = {}
    for job_type, bucket, day_n, hour_n in await store._fetch(F["type_buckets"], queue, day_minute, hour_minute):
        buckets.setdefault(job_type, {})[int(bucket)] = (_int(day_n), _int(hour_n))
    return TypeFiguresRead(totals, buckets)


async def delete_queue_figures(tx: Tx, queue: str) -> None:
    """Drop a deleted queue's figures (inside ``delete_queue``'s transaction)."""
    await tx.conn.execute(F["delete_queue_types"], queue)
    await tx.conn.execute(F["delete_queue_runs"], queue)
