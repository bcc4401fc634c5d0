"""Conformance: ``Store.upsert_queue`` / ``load_queues`` and the store's lifecycle (SPEC §1
"Queue"): queues by name, replaced whole, kept across a reopen; ``close`` is idempotent.
"""

from __future__ import annotations

from sepp.domain.records import QueueRecord
from storage.conformance_kit import NOW, ConformanceStore, StoreFactory


async def test_upsert_creates_then_replaces_settings_and_flags(store: ConformanceStore) -> None:
    assert await store.load_queues() == []
    b = QueueRecord("b", '{"default_priority": 1}', False, True)
    a = QueueRecord("a", "{}", True, False)
    await store.upsert_queue(b, NOW)
    await store.upsert_queue(a, NOW)
    assert await store.load_queues() == [a, b]  # by name
    b2 = QueueRecord("b", '{"default_priority": 8}', True, False)
    await store.upsert_queue(b2, NOW + 1)
    assert await store.load_queues() == [a, b2]


async def test_queues_survive_a_reopen_and_close_is_idempotent(store: ConformanceStore,
                                                               store_factory: StoreFactory) -> None:
    q = QueueRecord("kept", '{"lease_duration": 5.0}', True, True)
    await store.upsert_queue(q, NOW)
    await store.close()
    await store.close()
    again = await store_factory()
    assert await again.load_queues() == [q]
