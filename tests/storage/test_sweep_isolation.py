"""Sweeps isolate failures: a row a pass cannot process is
skipped and reported, and every other due job, expired lease and prunable row is handled in
that same pass — also when the unprocessable rows sort first and fill a whole page.

Real SQLite files, no mocks. The unprocessable rows are made the ways that do not depend on
what the API accepts: a queue policy whose arithmetic overflows SQLite's 64-bit integers
(the issue's reproduction 3, handed to the store directly), a history that is not JSON
written into the file, and triggers that refuse one row.
"""

from __future__ import annotations

import asyncio
import os
import sqlite3
import tempfile
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from sepp.storage.base import JobRow, PolicyTable, QueuePolicy, ReserveParams, State
from sepp.storage.sqlite import SQLiteStore
from sepp.storage.sqlite.store import DB_FILE

NOW = 1_790_000_000_000_000
SECOND = 1_000_000
#: dead_letter_retention = 10**13 s in µs: now + it does not fit in SQLite's INTEGER.
OVERFLOWING = QueuePolicy(dead_retention=10**13 * SECOND)


def _row(queue: str, state: int = int(State.READY), run_at: int = NOW, max_attempts: int = 5) -> JobRow:
    return JobRow(os.urandom(16), queue, "t", state, 0, run_at, NOW, max_attempts, b"p", "", None, None)


def _run(body: Callable[[SQLiteStore, Path], Awaitable[None]], writer: str = "thread") -> None:
    async def main(folder: Path) -> None:
        store = SQLiteStore(folder, writer=writer)
        await store.open()
        try:
            await body(store, folder / DB_FILE)
        finally:
            await store.close()

    with tempfile.TemporaryDirectory() as tmp:
        asyncio.run(main(Path(tmp)))


def _edit(db: Path, sql: str, params: tuple[object, ...] = ()) -> None:
    """Change the database file behind the store's back (as an old or damaged file would be)."""
    conn = sqlite3.connect(db, isolation_level=None)
    try:
        conn.execute("PRAGMA busy_timeout=10000")
        conn.execute(sql, params)
    finally:
        conn.close()


async def _lease(store: SQLiteStore, rows: list[JobRow], lease: int = SECOND) -> None:
    await store.enqueue(rows, [0] * len(rows), NOW)
    queues = sorted({r.queue for r in rows})
    got = await store.reserve(ReserveParams(queues, len(rows), NOW, dict.fromkeys(queues, lease), "w"))
    assert len(got) == len(rows)


async def _state(store: SQLiteStore, job_id: bytes) -> int:
    rec = await store.get_job(job_id)
    assert rec is not None
    return rec.state


def test_an_overflowing_policy_on_one_queue_does_not_stop_reclaiming_another() -> None:
    # Reproduction 3: archive's last attempt would be dead-lettered with a purge time past
    # int64; its lease expired first (sorts first). emails' lease must still come back.
    async def body(store: SQLiteStore, _db: Path) -> None:
        poison, mail = _row("archive", max_attempts=1), _row("emails")
        await _lease(store, [poison])
        await store.enqueue([mail], [0], NOW)
        await store.reserve(ReserveParams(["emails"], 1, NOW + 1, {"emails": SECOND}, "w"))
        policy = PolicyTable(QueuePolicy(), {"archive": OVERFLOWING})
        result = await store.reclaim_expired(NOW + 2 * SECOND, 100, policy)
        assert result.count == 1 and result.queues == frozenset({"emails"})
        assert await _state(store, mail.id) == State.READY
        assert await _state(store, poison.id) == State.RESERVED  # left as it was
        (skipped,) = result.skipped
        assert (skipped.job_id, skipped.queue) == (poison.id, "archive")
        assert "OverflowError" in skipped.error and len(skipped.error) <= 305
        # It is tried again (and skipped again) by the next pass; fixed, it is handled.
        again = await store.reclaim_expired(NOW + 3 * SECOND, 100, policy)
        assert again.count == 0 and [s.job_id for s in again.skipped] == [poison.id]
        fixed = await store.reclaim_expired(NOW + 4 * SECOND, 100, PolicyTable(QueuePolicy()))
        assert fixed.count == 1 and fixed.dead_lettered == {"archive": 1} and not fixed.skipped
        assert await _state(store, poison.id) == State.DEAD_LETTERED

    _run(body)


def test_poison_rows_that_fill_a_whole_page_do_not_starve_the_rows_behind_them() -> None:
    # limit 2, three unprocessable leases ahead of two good ones: the pass pages on past
    # them and reclaims both good leases (its limit counts rows handled, not rows tried).
    async def body(store: SQLiteStore, db: Path) -> None:
        bad = [_row("archive") for _ in range(3)]
        good = [_row("emails") for _ in range(3)]
        await _lease(store, bad, lease=SECOND)
        await store.enqueue(good, [0] * 3, NOW)
        await store.reserve(ReserveParams(["emails"], 3, NOW, {"emails": 2 * SECOND}, "w"))
        _edit(db, "UPDATE jobs SET history = 'not json' WHERE queue = 'archive'")
        result = await store.reclaim_expired(NOW + 5 * SECOND, 2, PolicyTable(QueuePolicy()))
        assert result.count == 2
        assert sorted(s.job_id for s in result.skipped) == sorted(r.id for r in bad)
        assert all(s.queue == "archive" and "malformed JSON" in s.error for s in result.skipped)
        states = [await _state(store, r.id) for r in good]
        assert sorted(states) == [State.READY, State.READY, State.RESERVED]  # limit 2 held
        assert [await _state(store, r.id) for r in bad] == [State.RESERVED] * 3

    _run(body)


def test_a_row_the_promotion_cannot_move_is_skipped_and_reserve_still_works() -> None:
    async def body(store: SQLiteStore, db: Path) -> None:
        poison, other = _row("a", int(State.SCHEDULED), NOW + 1), _row("b", int(State.SCHEDULED), NOW + 2)
        await store.enqueue([poison, other], [0, 0], NOW)
        _edit(db, "CREATE TRIGGER poison BEFORE UPDATE OF state ON jobs WHEN old.id = ? "
                  "BEGIN SELECT RAISE(ABORT, 'poison row'); END".replace("?", f"x'{poison.id.hex()}'"))
        result = await store.promote_due(NOW + 10, 100)
        assert result.count == 1 and result.queues == frozenset({"b"})
        assert [(s.job_id, s.queue) for s in result.skipped] == [(poison.id, "a")]
        assert "poison row" in result.skipped[0].error
        # Reserve promotes on its own too: the poison row does not fail it.
        third = _row("c", int(State.SCHEDULED), NOW + 3)
        await store.enqueue([third], [0], NOW)
        got = await store.reserve(ReserveParams(["c"], 1, NOW + 10, {"c": SECOND}, "w"))
        assert [r.id for r in got] == [third.id]

    _run(body)


def test_a_job_or_key_the_retention_pass_cannot_delete_is_skipped() -> None:
    async def body(store: SQLiteStore, db: Path) -> None:
        jobs = [_row("a"), _row("b"), _row("b")]
        keyed = [r._replace(idempotency_key=f"k{i}") for i, r in enumerate([_row("a"), _row("b")])]
        await store.enqueue(jobs + keyed, [0, 0, 0, NOW + 1, NOW + 1], NOW)
        _edit(db, "UPDATE jobs SET state = 4, finished_at = ?, purge_at = ? WHERE queue IN ('a', 'b')",
              (NOW, NOW + 1))
        _edit(db, "CREATE TRIGGER keep_job BEFORE DELETE ON jobs WHEN old.id = "
                  f"x'{jobs[1].id.hex()}' BEGIN SELECT RAISE(ABORT, 'cannot delete'); END")
        _edit(db, "CREATE TRIGGER keep_key BEFORE DELETE ON idempotency WHEN old.key = 'k0' "
                  "BEGIN SELECT RAISE(ABORT, 'cannot delete'); END")
        result = await store.prune(NOW + 2, 100)
        assert result.count == 4 + 1  # 5 jobs less the poison one, 2 keys less the poison one
        assert sorted((s.job_id, s.queue, s.key) for s in result.skipped) == sorted(
            [(jobs[1].id, "b", None), (keyed[0].id, "a", "k0")])
        assert await store.get_job(jobs[1].id) is not None
        assert all([await store.get_job(r.id) is None for r in (jobs[0], jobs[2], *keyed)])

    _run(body)


@pytest.mark.parametrize("writer", ["process"])
def test_skipped_rows_cross_from_the_writer_process(writer: str) -> None:
    async def body(store: SQLiteStore, _db: Path) -> None:
        poison, mail = _row("archive", max_attempts=1), _row("emails")
        await _lease(store, [poison, mail])
        policy = PolicyTable(QueuePolicy(), {"archive": OVERFLOWING})
        result = await store.reclaim_expired(NOW + 2 * SECOND, 100, policy)
        assert result.count == 1 and [s.job_id for s in result.skipped] == [poison.id]

    _run(body, writer)
