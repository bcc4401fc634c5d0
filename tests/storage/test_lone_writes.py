"""The lone-write path and the group-commit wait: a one-job enqueue with
nothing else writing skips the committer hop; concurrent ones still share commits; the
group-commit wait never delays a write submitted while no other was in flight.
Real SQLite files and a real writer process, no mocks."""

from __future__ import annotations

import asyncio
import queue
import sqlite3
import threading
import time
from pathlib import Path

import pytest
import uuid_utils

from sepp.storage.base import JobRow
from sepp.storage.sqlite import SQLiteStore
from sepp.storage.sqlite.committer import STOP, GroupLoop, Pending, Results
from sepp.storage.sqlite.lone import BATCH_QUIET, LONE_MAX_JOBS, MAX_RUN, QUIET_GAP, RUN_JOBS
from sepp.storage.sqlite.ops import insert_jobs
from sepp.storage.sqlite.schema import connect_writer


def _row(i: int, key: str | None = None) -> JobRow:
    now = time.time_ns() // 1000
    return JobRow(uuid_utils.uuid7().bytes, "q", f"t{i}", 2, 0, now, now, 3, b"x", "", None, key)


def _stored(path: Path) -> int:
    with sqlite3.connect(path) as conn:
        return int(conn.execute("SELECT count(*) FROM jobs").fetchone()[0])


@pytest.mark.parametrize(("mode", "writer"), [("group", "process"), ("async", "process"), ("sync", "thread")])
async def test_a_lone_enqueue_commits_on_the_lone_path_and_is_stored(tmp_path: Path, mode: str, writer: str) -> None:
    store = SQLiteStore(tmp_path, mode, writer=writer)
    await store.open()
    try:
        before = store.committer.commits
        for i in range(5):
            await asyncio.sleep(QUIET_GAP * 2)  # a lone producer: a round trip between writes
            assert await store.enqueue([_row(i)], [0], 0) == {}
        # The key path (dedup inside the write) is lone too, and still deduplicates.
        await asyncio.sleep(QUIET_GAP * 2)
        assert await store.enqueue([_row(5, "k")], [2**62], 0) == {}
        await asyncio.sleep(QUIET_GAP * 2)
        assert 0 in await store.enqueue([_row(6, "k")], [2**62], 0)
        assert store.committer.commits == before, "a lone write went through the committer"
        assert store.commits == before + 7
    finally:
        await store.close()
    assert _stored(tmp_path / "sepp.db") == 6


@pytest.mark.parametrize(("mode", "writer"), [("group", "process"), ("async", "process"), ("sync", "thread")])
async def test_a_sequential_producers_batches_commit_on_the_lone_path_up_to_the_limit(
        tmp_path: Path, mode: str, writer: str) -> None:
    """Plain batches of at most ``LONE_MAX_JOBS`` jobs with nothing else writing skip the
    committer, one commit each; one job more goes to the committer; all are stored."""
    store = SQLiteStore(tmp_path, mode, writer=writer)
    await store.open()
    try:
        assert store._lone is not None
        before, lone_before = store.committer.commits, store._lone.commits
        n = 0
        for size in (2, 100, LONE_MAX_JOBS):
            await asyncio.sleep(QUIET_GAP * 2)
            assert await store.enqueue([_row(n + i) for i in range(size)], [0] * size, 0) == {}
            n += size
        assert store.committer.commits == before, "a lone batch went through the committer"
        assert store._lone.commits == lone_before + 3
        await asyncio.sleep(QUIET_GAP * 2)
        await store.enqueue([_row(n + i) for i in range(LONE_MAX_JOBS + 1)], [0] * (LONE_MAX_JOBS + 1), 0)
        n += LONE_MAX_JOBS + 1
        assert store._lone.commits == lone_before + 3, "a batch past LONE_MAX_JOBS took the lone path"
        assert store.committer.commits == before + 1
    finally:
        await store.close()
    assert _stored(tmp_path / "sepp.db") == n


async def test_batches_sent_several_at_a_time_keep_to_the_committer(tmp_path: Path) -> None:
    """Once two batches waited for the committer at once (``enqueue_many``), batches keep to
    the committer for ``BATCH_QUIET`` seconds (the writer process inserts one while the event
    loop prepares the next); after that a lone batch takes the lone path again."""
    store = SQLiteStore(tmp_path, "group", writer="process")
    await store.open()
    try:
        assert store._lone is not None
        n = 0

        def batch(size: int = 64) -> list[JobRow]:
            nonlocal n
            rows = [_row(n + i) for i in range(size)]
            n += size
            return rows

        # Batches too large for the lone path, so all of them wait for the committer, at once.
        # Their overlap is noted no earlier than ``began``; when the next batch comes less than
        # BATCH_QUIET after ``began`` it must keep to the committer. On a loaded machine the four
        # commits can outlast BATCH_QUIET: then the round proves nothing and is tried again.
        big = LONE_MAX_JOBS + 1
        for _ in range(20):
            lone_before = store._lone.commits
            began = time.perf_counter()
            await asyncio.gather(*(store.enqueue(batch(big), [0] * big, 0) for _ in range(4)))
            assert store._lone.commits == lone_before
            await asyncio.sleep(QUIET_GAP * 2)
            lone_before, committed = store._lone.commits, store.committer.commits
            within = time.perf_counter() - began < BATCH_QUIET
            await store.enqueue(batch(), [0] * 64, 0)
            if within:
                break
        else:
            pytest.fail(f"20 rounds of four overlapping batches each took longer than {BATCH_QUIET} s")
        assert store._lone.commits == lone_before and store.committer.commits == committed + 1
        await asyncio.sleep(BATCH_QUIET * 1.5)
        await store.enqueue(batch(), [0] * 64, 0)
        assert store._lone.commits == lone_before + 1, "a lone batch after the quiet time missed the lone path"
    finally:
        await store.close()
    assert _stored(tmp_path / "sepp.db") == n


async def test_lone_batches_hand_over_to_the_committer_sooner(tmp_path: Path) -> None:
    """A lone batch counts ``1 + jobs // RUN_JOBS`` towards ``MAX_RUN``, so a run of batches
    of 256 reaches the committer (whose commit checkpoints the WAL) every few batches."""
    store = SQLiteStore(tmp_path, "group", writer="process")
    await store.open()
    try:
        assert store._lone is not None
        per = 1 + LONE_MAX_JOBS // RUN_JOBS
        batches = 3 * (MAX_RUN // per + 1)
        before = store.committer.commits
        for b in range(batches):
            await asyncio.sleep(QUIET_GAP * 2)
            await store.enqueue([_row(b * 1000 + i) for i in range(LONE_MAX_JOBS)], [0] * LONE_MAX_JOBS, 0)
        handed = store.committer.commits - before
        assert handed >= 2, f"{handed} of {batches} batches went to the committer"
        assert handed <= batches // (MAX_RUN // per), f"{handed} of {batches} batches went to the committer"
    finally:
        await store.close()
    assert _stored(tmp_path / "sepp.db") == batches * LONE_MAX_JOBS


async def test_concurrent_enqueues_still_share_commits(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path, "group", writer="process")
    await store.open()
    try:
        before = store.commits
        await asyncio.gather(*(store.enqueue([_row(i)], [0], 0) for i in range(64)))
        # Quiet, 64 writes take 2-4 commits (the first alone, the rest fold in behind its fsync);
        # on a loaded 2-core machine the writer drains faster than they arrive and took 9 once.
        # A commit each would be 64: at least 4 writes a commit on average still proves folding.
        assert store.commits - before <= 16, f"{store.commits - before} commits for 64 concurrent writes"
    finally:
        await store.close()
    assert _stored(tmp_path / "sepp.db") == 64


def _delay_after_a_group(path: Path, siblings: int) -> float:
    """Seconds from submitting a write (``siblings`` others in flight) to its commit, right
    after a group of two writes, with ``group_wait`` = 1 s."""
    source: queue.SimpleQueue[object] = queue.SimpleQueue()
    committed: list[float] = []

    def deliver(results: Results) -> None:
        committed.extend(time.monotonic() for _ in results)

    loop = GroupLoop(path, "group", lambda: connect_writer(path, "group", 8), deliver, group_wait=1.0,
                     source=source)  # type: ignore[arg-type]

    def op(i: int, siblings: int = 0) -> Pending[None]:
        return Pending(lambda conn: insert_jobs(conn, [_row(i)]), f"op{i}", 1, siblings)

    conn = loop.open()
    source.put(op(0))  # queued before the loop runs: one group of two
    source.put(op(1))
    runner = threading.Thread(target=loop.run, args=(conn,))
    runner.start()
    try:
        while len(committed) < 2:
            time.sleep(0.001)
        at = time.monotonic()
        source.put(op(2, siblings))
        while len(committed) < 3:
            time.sleep(0.001)
        return committed[2] - at
    finally:
        source.put(STOP)
        runner.join()


def test_the_group_wait_never_delays_a_write_with_no_sibling(tmp_path: Path) -> None:
    """After a group of several writes, a write submitted with no other in flight commits at
    once; one submitted while another was in flight waits ``group_wait``."""
    assert _delay_after_a_group(tmp_path / "a.db", 0) < 0.5, "a lone write was held by the group-commit wait"
    assert _delay_after_a_group(tmp_path / "b.db", 1) >= 0.9, "the wait did not apply with a sibling in flight"


@pytest.mark.parametrize(("mode", "writer", "writes"), [("async", "thread", 3000), ("group", "process", 1200)])
async def test_a_long_run_of_lone_writes_keeps_the_wal_bounded(tmp_path: Path, mode: str, writer: str,
                                                               writes: int) -> None:
    """The lone connection never checkpoints (that would run on the event loop); every
    ``MAX_RUN`` lone commits one write goes to the committer, whose commit checkpoints, so a
    lone-only run keeps the WAL near SQLite's 1,000-page autocheckpoint mark. (Each one-job
    insert appends ~2.5 pages: without the hand-over the WAL would reach ~3,000–7,500.)"""
    store = SQLiteStore(tmp_path, mode, writer=writer)
    await store.open()
    wal = tmp_path / "sepp.db-wal"
    try:
        assert store._lone is not None
        assert store._lone._conn is not None
        assert store._lone._conn.execute("PRAGMA wal_autocheckpoint").fetchone()[0] == 0
        page = store._lone._conn.execute("PRAGMA page_size").fetchone()[0]
        largest = 0
        for i in range(writes):
            if mode != "async":
                await asyncio.sleep(QUIET_GAP * 1.5)
            await store.enqueue([_row(i)], [0], 0)
            largest = max(largest, wal.stat().st_size)
        assert store._lone.commits >= writes * (1 - 2 / MAX_RUN), "the writes did not take the lone path"
        assert store._lone.commits <= writes * (1 - 1 / (MAX_RUN + 1)) + 1, "no write went to the committer"
        assert largest <= (1000 + 4 * MAX_RUN + 100) * (page + 24), f"the WAL grew to {largest // page} pages"
    finally:
        await store.close()
    assert _stored(tmp_path / "sepp.db") == writes
