"""The backend parameter of the storage conformance suite (issue 9 item 4; issue 10 item 3).

``BACKENDS`` names every storage backend; each conformance test (``test_conformance_*.py``)
asks for ``store`` (or ``store_factory``) and so runs once per entry. Every store is built
by ``storage.factory.open_store`` from a small config, as the server builds it. Adding a
backend means adding one entry here and one branch in ``_config`` — nothing in the tests.

* ``sqlite``: ``storage = "sqlite"`` in ``tmp_path``, persist mode ``group`` (the default),
  the writer in a thread (``[sqlite] writer = "thread"``).
* ``sqlite-process``: the same with the writer in its own process (what ``sepp serve`` runs
  in group mode): every operation, its arguments and its result cross a process boundary,
  so an op or a result that does not pickle fails here. It costs ~0.5 s a store (the whole
  suite ~40 s instead of ~5 s), so it joins only when ``CONFORMANCE_ALL=1`` is set (not a
  ``SEPP_`` name: tests/conftest.py clears those).

Persist modes (``sync`` / ``group`` / ``async``) are not a parameter: they change only
``PRAGMA synchronous`` and commit grouping, never what an operation returns.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from sepp.domain.clock import FakeClock
from sepp.storage.base import Store
from sepp.storage.config import SQLiteSettings
from sepp.storage.factory import open_store
from storage.conformance_kit import NOW, StoreFactory

#: Every backend the conformance suite runs against (issue 10 adds "postgres").
BACKENDS = ["sqlite"] + (["sqlite-process"] if os.environ.get("CONFORMANCE_ALL") == "1" else [])


@dataclass(frozen=True)
class _Config:
    """What ``open_store`` reads (``storage.config.StoreConfig``), without the server's config."""

    storage: str
    data_dir: Path
    persist_mode: str = "group"
    group_commit_wait: float = 0.004
    debug_commit_delay: float = 0.0
    sqlite: SQLiteSettings = field(default_factory=SQLiteSettings)


def _config(backend: str, folder: Path) -> _Config:
    """The store config of ``backend`` keeping its data under ``folder``."""
    if backend in ("sqlite", "sqlite-process"):
        settings = SQLiteSettings(writer="process" if backend == "sqlite-process" else "thread")
        return _Config("sqlite", folder, sqlite=settings)
    raise AssertionError(f"unknown backend {backend!r}")


@pytest.fixture(params=BACKENDS)
async def store_factory(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[StoreFactory]:
    """Open stores of one backend over one fresh data location (``open_store`` with a
    ``FakeClock`` at ``NOW``); every store opened is closed at teardown (close is
    idempotent). A second call after closing the first reopens the same data (durability)."""
    opened: list[Store] = []
    config = _config(request.param, tmp_path / "store")

    async def make() -> Store:
        store = open_store(config, FakeClock(NOW))
        await store.open()
        opened.append(store)
        return store

    yield make
    for store in opened:
        await store.close()


@pytest.fixture
async def store(store_factory: StoreFactory) -> Store:
    """A fresh, open store of the backend under test (closed at teardown)."""
    return await store_factory()
