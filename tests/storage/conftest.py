"""The backend parameter of the storage conformance suite.

Each conformance test (``test_conformance_*.py``) asks for ``store`` (or ``store_factory``)
and so runs once per entry of ``support.backends.BACKENDS``. Every store is built by
``storage.factory.open_store`` from a small config, as the server builds it. Adding a
backend means adding it in tests/support/backends.py — nothing here or in the tests.

Persist modes (``sync`` / ``group`` / ``async``) are not a parameter: they change only
``PRAGMA synchronous`` and commit grouping, never what an operation returns.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from support.backends import BACKENDS, StoreSettings, store_settings

from sepp.domain.clock import FakeClock
from sepp.storage.base import Store
from sepp.storage.factory import open_store
from storage.conformance_kit import NOW, StoreFactory


def _config(backend: str, folder: Path) -> StoreSettings:
    """The store config of ``backend`` keeping its data under ``folder`` (SQLite) or in a
    fresh schema of its own (PostgreSQL: ``store_settings`` names one per call)."""
    return StoreSettings(data_dir=folder, node_name="conformance", **store_settings(backend))


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
