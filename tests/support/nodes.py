"""Several nodes on one database: ``open_nodes`` opens ``n`` stores of one backend on one
fresh PostgreSQL schema, as ``n`` sepp nodes would share it (the two- and three-node
storage tests; SQLite's folder holds one process, so those tests are ``postgres_only``)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from sepp.domain.clock import FakeClock
from sepp.storage.base import Store
from sepp.storage.factory import open_store
from support.backends import StoreSettings, store_settings


@asynccontextmanager
async def open_nodes(backend: str, data_dir: Path, now: int, n: int = 2,
                     dsn_options: str = "") -> AsyncIterator[tuple[list[Store], str]]:
    """``n`` open stores of ``backend`` on one fresh schema (``store_settings`` names one
    per call; node name ``n``, each store with a ``FakeClock`` frozen at ``now``), and that
    schema's name. ``dsn_options`` (``deadlock_timeout=60s``) is added to the DSN's query,
    so every session of the stores has it. The stores are closed on leaving."""
    settings = store_settings(backend)
    if dsn_options:
        dsn = settings["postgres_dsn"]
        settings["postgres_dsn"] = f"{dsn}{'&' if '?' in dsn else '?'}{dsn_options}"
    config = StoreSettings(data_dir=data_dir, node_name="n", **settings)
    stores = [open_store(config, FakeClock(now)) for _ in range(n)]
    for s in stores:
        await s.open()
    try:
        yield stores, settings["postgres"].schema
    finally:
        for s in stores:
            await s.close()
