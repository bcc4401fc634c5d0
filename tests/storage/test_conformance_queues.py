"""Conformance: ``Store.upsert_queue`` / ``change_queue`` / ``load_queues`` and the store's
lifecycle (SPEC §1 "Queue"): queues by name, replaced whole, kept across a reopen; a change
made over the stored row, so concurrent changes of one queue — on one store or on two
nodes of one PostgreSQL database — all take effect; ``close`` is idempotent; ``figures``,
``abort`` (nothing acknowledged lost) and ``failure``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest
from support.nodes import open_nodes

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


def _set(key: str, value: object) -> Callable[[QueueRecord | None], QueueRecord]:
    """A change that sets one settings key over the row it is given (as the admin engine
    merges a masked field over the stored settings)."""
    def change(stored: QueueRecord | None) -> QueueRecord:
        assert stored is not None
        return replace(stored, settings_json=json.dumps({**json.loads(stored.settings_json), key: value}))
    return change


def _bump(stored: QueueRecord | None) -> QueueRecord:
    """A change that counts: ``n`` + 1 over the stored row (0 for a new one)."""
    n = 0 if stored is None else json.loads(stored.settings_json)["n"]
    return QueueRecord("ignored", json.dumps({"n": n + 1}), False, True)


async def test_change_queue_changes_the_stored_row_and_returns_it(store: Store) -> None:
    seen: list[QueueRecord | None] = []

    def create(stored: QueueRecord | None) -> QueueRecord:
        seen.append(stored)
        return QueueRecord("other name", '{"default_priority": 2}', True, False)

    made = await store.change_queue("q", create, NOW)
    assert seen == [None]
    assert made == QueueRecord("q", '{"default_priority": 2}', True, False)  # the name given wins
    assert await store.load_queues() == [made]
    changed = await store.change_queue("q", _set("max_in_flight", 3), NOW + 1)
    assert changed == QueueRecord("q", '{"default_priority": 2, "max_in_flight": 3}', True, False)
    assert await store.load_queues() == [changed]  # flags kept as the change returned them


async def test_what_a_change_raises_reaches_the_caller_and_nothing_is_written(store: Store) -> None:
    q = QueueRecord("q", '{"default_priority": 2}', False, True)
    await store.upsert_queue(q, NOW)

    def refuse(stored: QueueRecord | None) -> QueueRecord:
        raise LookupError("refused over " + (stored.settings_json if stored else "nothing"))

    with pytest.raises(LookupError, match=re.escape('refused over {"default_priority": 2}')):
        await store.change_queue("q", refuse, NOW + 1)
    assert await store.load_queues() == [q]
    assert (await store.change_queue("q", _set("default_priority", 4), NOW + 2)).settings_json \
        == '{"default_priority": 4}'  # the store still writes


async def test_concurrent_changes_of_one_queue_all_take_effect(store: Store) -> None:
    await asyncio.gather(*(store.change_queue("q", _bump, NOW) for _ in range(20)))
    (rec,) = await store.load_queues()
    assert json.loads(rec.settings_json) == {"n": 20}


nodes_only = pytest.mark.postgres_only(reason="several nodes on one database: SQLite's folder holds one process")


@nodes_only
async def test_two_nodes_changing_different_keys_keep_both(backend: str, tmp_path: Path) -> None:
    # The `sepp queues update` bug: node B merged over its cached copy, which missed A's change.
    async with open_nodes(backend, tmp_path, NOW) as ((a, b), _):
        await a.upsert_queue(QueueRecord("q", '{"default_priority": 5, "max_in_flight": 0}', False, True), NOW)
        await a.change_queue("q", _set("default_priority", 7), NOW + 1)
        await b.change_queue("q", _set("max_in_flight", 2), NOW + 2)
        for store in (a, b):
            (rec,) = await store.load_queues()
            assert json.loads(rec.settings_json) == {"default_priority": 7, "max_in_flight": 2}


@nodes_only
async def test_two_nodes_changing_one_queue_at_once_lose_no_change(backend: str, tmp_path: Path) -> None:
    async with open_nodes(backend, tmp_path, NOW) as (nodes, _):
        await asyncio.gather(*(nodes[i % 2].change_queue("q", _bump, NOW) for i in range(30)))  # the first creates
        (rec,) = await nodes[1].load_queues()
        assert json.loads(rec.settings_json) == {"n": 30}


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
