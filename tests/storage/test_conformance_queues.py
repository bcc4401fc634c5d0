"""Conformance: ``Store.upsert_queue`` / ``load_queues`` and the store's lifecycle (SPEC §1
"Queue"): queues by name, replaced whole, kept across a reopen; ``close`` is idempotent;
``figures``, ``abort`` (nothing acknowledged lost) and ``failure`` (issue 9 item 2).
"""

from __future__ import annotations

import asyncio
import contextlib

from sepp.domain.records import QueueRecord
from sepp.domain.states import State
from sepp.storage.base import Store
from storage.conformance_kit import NOW, StoreFactory, get, lease, put, row


async def test_upsert_creates_then_replaces_settings_and_flags(store: Store) -> None:
    assert await store.load_queues() == []
    b = QueueRecord("b", '{"default_priority": 1}', False, True)
    a = QueueRecord("a", "{}", True, False)
    await store.upsert_queue(b, NOW)
    await store.upsert_queue(a, NOW)
    assert await store.load_queues() == [a, b]  # by name
    b2 = QueueRecord("b", '{"default_priority": 8}', True, False)
    await store.upsert_queue(b2, NOW + 1)
    assert await store.load_queues() == [a, b2]


async def test_queues_survive_a_reopen_and_close_is_idempotent(store: Store,
                                                               store_factory: StoreFactory) -> None:
    q = QueueRecord("kept", '{"lease_duration": 5.0}', True, True)
    await store.upsert_queue(q, NOW)
    await store.close()
    await store.close()
    again = await store_factory()
    assert await again.load_queues() == [q]


async def test_figures_count_commits_and_the_backlog_is_empty_when_idle(store: Store) -> None:
    before = store.figures()
    assert before.backlog == store.backlog == 0
    await put(store, row())
    await put(store, row(), row())
    await store.upsert_queue(QueueRecord("q", "{}", False, False), NOW)
    after = store.figures()
    assert after.backlog == 0
    # Each call is one commit at most (group commit may fold some), and at least one was made.
    assert before.commits < after.commits <= before.commits + 3


async def test_an_abort_loses_nothing_acknowledged(store: Store, store_factory: StoreFactory) -> None:
    rows = [row(key="k"), row(), row()]
    await put(store, rows[0])
    await put(store, *rows[1:])
    store.abort()
    await store.close()
    again = await store_factory()
    assert [(await get(again, r.id)).state for r in rows] == [int(State.READY)] * 3
    assert await put(again, row(key="k"), now=NOW + 1) == {0: (rows[0].id, int(State.READY))}


async def test_failure_does_not_return_while_the_store_works(store: Store) -> None:
    waiting = asyncio.create_task(store.failure())
    await put(store, row())
    for _ in range(5):
        await asyncio.sleep(0)
    assert not waiting.done()
    waiting.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await waiting
    assert (await lease(store))[0].state == State.RESERVED
