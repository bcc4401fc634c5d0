"""Multi-row INSERTs bind a column once when every row of the chunk shares its value
(``_insert_jobs``): whatever mix of shared and varying columns a batch has, each job
reads back exactly as it was given. Real SQLite file, no mocks."""

from __future__ import annotations

import asyncio
import os
import tempfile
from pathlib import Path
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from sepp.storage.base import JobRow
from sepp.storage.sqlite import SQLiteStore

NOW = 1_790_000_000_000_000

#: Small pools per column, so a drawn batch has some columns shared and some varying.
_column: dict[str, st.SearchStrategy[Any]] = {
    "queue": st.sampled_from(["a", "b"]),
    "job_type": st.sampled_from(["t", "u"]),
    "state": st.sampled_from([1, 2]),
    "priority": st.sampled_from([0, 9]),
    "run_at": st.sampled_from([NOW, NOW + 5]),
    "max_attempts": st.sampled_from([1, 25]),
    "payload": st.binary(max_size=8),
    "encoding": st.sampled_from(["", "application/json"]),
    "extras": st.sampled_from([None, b"\x01\x02"]),
    "idempotency_key": st.sampled_from([None, "k"]),
}


@st.composite
def batches(draw: st.DrawFn) -> list[JobRow]:
    """1–600 rows (over one 512-row chunk), each column drawn constant or per row."""
    n = draw(st.sampled_from([1, 2, 3, 255, 512, 513, 600]))
    fixed = {name: draw(strategy) for name, strategy in _column.items()}
    varying = draw(st.sets(st.sampled_from(sorted(_column))))
    rows = []
    for i in range(n):
        value: dict[str, Any] = {name: draw(_column[name]) if name in varying else fixed[name] for name in _column}
        key = value["idempotency_key"]
        rows.append(JobRow(os.urandom(16), value["queue"], value["job_type"], value["state"], value["priority"],
                           value["run_at"], NOW, value["max_attempts"], value["payload"], value["encoding"],
                           value["extras"], None if key is None else f"{key}{i}"))
    return rows


async def _roundtrip(folder: Path, rows: list[JobRow]) -> None:
    store = SQLiteStore(folder)
    await store.open()
    try:
        # Unique keys per row: the batch takes the insert path with idempotency claims only
        # when a key is present; both paths end in _insert_jobs.
        await store.enqueue(rows, [NOW + 60_000_000 if r.idempotency_key else 0 for r in rows], NOW)
        for row in rows:
            rec = await store.get_job(row.id)
            assert rec is not None
            got = (rec.id, rec.queue, rec.job_type, rec.state, rec.priority, rec.run_at, rec.enqueued_at,
                   rec.max_attempts, rec.payload, rec.encoding, rec.extras, rec.idempotency_key)
            assert got == tuple(row)
    finally:
        await store.close()


@settings(max_examples=25, deadline=None)
@given(rows=batches())
def test_every_job_of_a_batch_reads_back_as_given(rows: list[JobRow]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        asyncio.run(_roundtrip(Path(tmp), rows))
