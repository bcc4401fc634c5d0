"""Finished jobs told across two stores on one PostgreSQL schema (two nodes): a node tells
the others only once one of them said callers wait on it; then the ids it says finished
reach the waiting node's ``on_finished`` callback (in notifications of at most 200 ids), and
queues named without ids too. A node's own notifications are not handed back to it."""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator, Sequence
from pathlib import Path

import pytest
from support.nodes import open_nodes
from support.worker import until

from sepp.storage.base import Store
from storage.conformance_kit import NOW

pytestmark = pytest.mark.postgres_only(reason="two nodes on one database: SQLite's folder holds one process")


@pytest.fixture
async def two_nodes(backend: str, tmp_path: Path) -> AsyncIterator[tuple[Store, Store]]:
    """Two open stores on one fresh schema."""
    async with open_nodes(backend, tmp_path, NOW) as ((a, b), _schema):
        yield a, b


async def test_finished_jobs_reach_a_node_that_said_it_waits(two_nodes: tuple[Store, Store]) -> None:
    a, b = two_nodes
    heard: list[tuple[list[bytes] | None, list[str]]] = []
    mine: list[object] = []

    def record_mine(ids: Sequence[bytes] | None, queues: Sequence[str]) -> None:
        mine.append((ids, queues))

    def record(ids: Sequence[bytes] | None, queues: Sequence[str]) -> None:
        heard.append((None if ids is None else list(ids), list(queues)))

    a.on_finished(record)
    b.on_finished(record_mine)
    assert not b.others_waiting
    early = os.urandom(16)
    b.finished([early], ())  # nobody said it waits: nothing sent
    a.waiting()
    await until(lambda: b.others_waiting, what="b to hear that a waits")
    assert not a.others_waiting  # a's own notice is not handed back to it
    ids = [os.urandom(16) for _ in range(450)]
    b.finished(ids, ())
    b.finished((), ["q1"])
    await until(lambda: sum(len(i or ()) for i, _ in heard) >= 450 and any("q1" in q for _, q in heard),
                what="a to hear of the 450 jobs and queue q1")
    got = [i for batch, _ in heard for i in batch or ()]
    assert sorted(got) == sorted(ids) and early not in got
    assert all(len(batch or ()) <= 200 for batch, _ in heard)
    await asyncio.sleep(0.05)  # b's own notifications never come back to b
    assert mine == []
