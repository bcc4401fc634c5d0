"""The job-type figures of the SQLite backend (issue 13 item 2; shapes and rules in
``sepp.storage.type_figures``): adds run on the writer (one transaction, folded into the
group commits like every write), reads on the reader threads."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from functools import partial
from typing import TYPE_CHECKING, Any

from sepp.storage._sql import load_queries
from sepp.storage.type_figures import TypeFiguresRead, TypeMinute, TypeRunBucket, TypeTotals

if TYPE_CHECKING:
    from sepp.storage.sqlite.store import SQLiteStore

F = load_queries("sepp.storage.sqlite", "type_figures.sql")


def _int(value: Any) -> int:
    """A summed column as an int (NULL and anything damaged read as 0)."""
    return value if isinstance(value, int) and value >= 0 else 0


async def add_type_figures(store: SQLiteStore, minutes: Sequence[TypeMinute], buckets: Sequence[TypeRunBucket],
                           keep_after_minute: int) -> None:
    """``AdminStore.add_type_figures`` on SQLite: one write operation."""
    await store.committer.submit(partial(_add_op, list(minutes), list(buckets), keep_after_minute), 0)


async def type_figures(store: SQLiteStore, queue: str, day_minute: int, hour_minute: int) -> TypeFiguresRead:
    """``AdminStore.type_figures`` on SQLite: two grouped range reads of the primary keys."""
    params: Any = {"queue": queue, "day": day_minute, "hour": hour_minute}
    totals: dict[str, tuple[TypeTotals, TypeTotals]] = {}
    for row in await store._read(F["type_totals"], params, False):
        if isinstance(row[0], str):
            day = TypeTotals(*(_int(v) for v in row[1:6]))
            hour = TypeTotals(*(_int(v) for v in row[6:11]))
            totals[row[0]] = (day, hour)
    buckets: dict[str, dict[int, tuple[int, int]]] = {}
    for job_type, bucket, day_n, hour_n in await store._read(F["type_buckets"], params, False):
        if isinstance(job_type, str) and isinstance(bucket, int):
            buckets.setdefault(job_type, {})[bucket] = (_int(day_n), _int(hour_n))
    return TypeFiguresRead(totals, buckets)


def _add_op(minutes: list[TypeMinute], buckets: list[TypeRunBucket], keep_after_minute: int,
            conn: sqlite3.Connection) -> None:
    """Writer side of ``add_type_figures`` (module-level: it pickles to the writer process)."""
    if minutes:
        conn.executemany(F["add_type_counts"], minutes)
    if buckets:
        conn.executemany(F["add_type_runs"], buckets)
    conn.execute(F["prune_type_counts"], (keep_after_minute,))
    conn.execute(F["prune_type_runs"], (keep_after_minute,))


def delete_queue_figures(queue: str, conn: sqlite3.Connection) -> None:
    """Drop a deleted queue's figures (inside ``delete_queue``'s write operation)."""
    conn.execute(F["delete_queue_types"], (queue,))
    conn.execute(F["delete_queue_runs"], (queue,))
