"""Conformance: ``Store.ping``, the readiness probe: an open store answers it
quickly, it writes nothing and counts as no commit, it answers while writes are going on,
and a closed store refuses it with ``StoreClosed``."""

from __future__ import annotations

import asyncio
import time

import pytest

from sepp.domain.states import State
from sepp.storage.base import Store
from sepp.storage.errors import StoreClosed
from storage.conformance_kit import get, put, row


async def test_an_open_store_answers_a_ping_well_within_a_second(store: Store) -> None:
    took = []
    for _ in range(5):
        started = time.monotonic()
        await store.ping()
        took.append(time.monotonic() - started)
    assert max(took) < 1.0, took  # the readiness probe's bound on one ping


async def test_a_ping_commits_nothing_and_changes_no_figure(store: Store) -> None:
    await put(store, row())
    before = store.figures()
    for _ in range(3):
        await store.ping()
    assert store.figures() == before
    assert store.backlog == 0


async def test_pings_answer_among_concurrent_writes(store: Store) -> None:
    rows = [row() for _ in range(20)]
    await asyncio.gather(*(put(store, r) for r in rows), *(store.ping() for _ in range(5)))
    assert [(await get(store, r.id)).state for r in rows] == [int(State.READY)] * len(rows)


async def test_a_closed_store_refuses_a_ping(store: Store) -> None:
    await store.close()
    with pytest.raises(StoreClosed):
        await store.ping()
