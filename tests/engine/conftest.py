"""The engine-level harness (``engine_kit.Harness``) as a fixture: a fresh store built by
``open_store`` from the ``ServerConfig`` (each backend of ``support.backends.BACKENDS``,
data in ``tmp_path``), the config's declared queues loaded as ``sepp serve`` loads them, a
``FakeClock`` at its default start; closed at teardown."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from support.backends import BACKENDS, store_settings

from engine.engine_kit import Harness, HarnessFactory
from sepp.domain.clock import FakeClock
from sepp.limits import QueueSettings
from sepp.server.config import ServerConfig
from sepp.server.engine import JobEngine
from sepp.server.notifier import Notifier
from sepp.server.parts import ServerParts
from sepp.server.queues import QueueRegistry
from sepp.server.sweeper.runner import Sweeper
from sepp.storage.base import Store
from sepp.storage.factory import open_store


@pytest.fixture(params=BACKENDS)
async def make_harness(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[HarnessFactory]:
    """Build harnesses on demand (each in its own folder), on each backend of
    ``support.backends.BACKENDS``; every store is closed at teardown. ``storage_settings``
    overrides the store keys (two harnesses given one ``postgres`` schema are two nodes of
    one database)."""
    backend: str = request.param
    stores: list[Store] = []

    async def make(queues: dict[str, dict[str, Any]] | None = None, **config: Any) -> Harness:
        folder = tmp_path / f"h{len(stores)}"
        storage = {**store_settings(backend), **config.pop("storage_settings", {})}  # e.g. a shared PG schema
        cfg = ServerConfig(data_dir=folder, queues={n: QueueSettings(**s) for n, s in (queues or {}).items()},
                           **storage, **config)
        clock = FakeClock()
        store = open_store(cfg, clock)
        await store.open()
        stores.append(store)
        registry = QueueRegistry(cfg.queue_defaults, cfg.strict, cfg.limits.max_encoding_bytes, cfg.limits.max_queues)
        for q in registry.load(await store.load_queues(), dict(cfg.queues)):  # as App.start does
            await store.upsert_queue(q.record(), clock.now())
            q.persisted = True
        parts = ServerParts.build(cfg, store, registry, Notifier(), clock=clock)
        return Harness(JobEngine(parts), Sweeper(parts, 60.0), clock, store)

    yield make
    for store in stores:
        await store.close()


@pytest.fixture
async def harness(make_harness: HarnessFactory) -> Harness:
    """A harness with the default config (non-strict: queues created on first enqueue)."""
    return await make_harness()


@pytest.fixture
async def nodes(backend: str, tmp_path: Path) -> AsyncIterator[Any]:
    """Engine nodes of ``backend`` on one store location (``test_config_queues.Nodes``:
    several on one PostgreSQL schema); every store left open is closed at teardown."""
    from engine.test_config_queues import Nodes

    n = Nodes(backend, tmp_path / "data")
    yield n
    for store in list(n.stores):
        await store.close()
