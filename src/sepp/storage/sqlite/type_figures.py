"""The job-type figures of the SQLite backend (shapes and rules in
``sepp.storage.type_figures``): adds run on the writer (one transaction, folded into the
group commits like every write), reads on the reader threads."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from functools import partial
from typing import TYPE_CHECKING, Any

from sepp.storage._sql import load_queries
from sepp.storage.type_figures import TypeFiguresRead, TypeMinute, TypeRunBucket, TypeTotals, prune_steps, read_windows

if TYPE_CHECKING:
    from sepp.storage.sqlite.reads import SQLiteReads

F = load_queries("sepp.storage.sqlite", "type_figures.sql")


def _int(value: Any) -> int:
    """A summed column as an int (NULL and anything damaged read as 0)."""
    return value if isinstance(value, int) and value >= 0 else 0


async def add_type_figures(reads: SQLiteReads, minutes: Sequence[TypeMinute], buckets: Sequence[TypeRunBucket],
                           keep_minutes_after: int, keep_hours_after: int) -> None:
    """``AdminStore.add_type_figures`` on SQLite: one write operation."""
    await reads.submit(partial(_add_op, list(minutes), list(buckets), keep_minutes_after,
                                         keep_hours_after), 0)


async def type_figures(reads: SQLiteReads, queue: str, day_minute: int, hour_minute: int) -> TypeFiguresRead:
    """``AdminStore.type_figures`` on SQLite: grouped range reads of the primary keys, one per
    step (hour rows for the day, minute rows for the hour)."""

    async def read_step(step: int, since: int) -> tuple[dict[str, TypeTotals], dict[tuple[str, int], int]]:
        params: Any = {"queue": queue, "step": step, "since": since}
        sums = {row[0]: TypeTotals(*(_int(v) for v in row[1:6]))
                for row in await reads.read(F["type_totals"], params, False) if isinstance(row[0], str)}
        runs = {(t, b): _int(n) for t, b, n in await reads.read(F["type_buckets"], params, False)
                if isinstance(t, str) and isinstance(b, int)}
        return sums, runs

    return await read_windows(read_step, day_minute, hour_minute)


def _add_op(minutes: list[TypeMinute], buckets: list[TypeRunBucket], keep_minutes_after: int,
            keep_hours_after: int, conn: sqlite3.Connection) -> None:
    """Writer side of ``add_type_figures`` (module-level: it pickles to the writer process)."""
    if minutes:
        conn.executemany(F["add_type_counts"], minutes)
    if buckets:
        conn.executemany(F["add_type_runs"], buckets)
    for step, keep in prune_steps(keep_minutes_after, keep_hours_after):
        conn.execute(F["prune_type_counts"], (step, keep))
        conn.execute(F["prune_type_runs"], (step, keep))


def delete_queue_figures(queue: str, conn: sqlite3.Connection) -> None:
    """Drop a deleted queue's figures (inside ``delete_queue``'s write operation)."""
    conn.execute(F["delete_queue_types"], (queue,))
    conn.execute(F["delete_queue_runs"], (queue,))
