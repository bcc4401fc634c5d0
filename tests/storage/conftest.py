"""The backend parameter of the storage conformance suite (issue 9 item 4; issue 10 item 3).

``BACKENDS`` names every storage backend; each conformance test (``test_conformance_*.py``)
asks for ``store`` (or ``store_factory``) and so runs once per entry. Adding a backend means
adding one entry here and one branch in ``_new_store`` — nothing in the tests themselves.

* ``sqlite``: ``SQLiteStore`` in ``tmp_path`` with its writer in a thread (persist mode
  ``group``, what ``sepp serve`` runs).
* ``sqlite-process``: the same with the writer in its own process (``writer="process"``,
  the placement ``sepp serve`` uses): every operation, its arguments and its result cross a
  process boundary, so an op or a result that does not pickle fails here. It costs ~0.5 s a
  store, so it runs the suite only when ``SEPP_CONFORMANCE_ALL=1`` (CI-length runs; see
  /work/tasks/conform-notes.md) — the thread placement runs every time.

Persist modes (``sync`` / ``group`` / ``async``) are not a parameter: they change only
``PRAGMA synchronous`` and commit grouping, never what an operation returns.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from storage.conformance_kit import ConformanceStore, StoreFactory

#: Every backend the conformance suite runs against (issue 10 adds "postgres").
BACKENDS = ["sqlite"] + (["sqlite-process"] if os.environ.get("CONFORMANCE_ALL") == "1" else [])


def _new_store(backend: str, folder: Path) -> ConformanceStore:
    """A not-yet-opened store of ``backend`` keeping its data under ``folder``."""
    if backend in ("sqlite", "sqlite-process"):
        from sepp.storage.sqlite import SQLiteStore

        return SQLiteStore(folder, "group", writer="process" if backend == "sqlite-process" else "thread")
    raise AssertionError(f"unknown backend {backend!r}")


@pytest.fixture(params=BACKENDS)
async def store_factory(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[StoreFactory]:
    """Open stores of one backend over one fresh data location; every store opened is closed
    at teardown (close is idempotent). A second call after closing the first reopens the same
    data (durability checks)."""
    opened: list[ConformanceStore] = []
    backend: str = request.param

    async def make() -> ConformanceStore:
        store = _new_store(backend, tmp_path / "store")
        await store.open()
        opened.append(store)
        return store

    yield make
    for store in opened:
        await store.close()


@pytest.fixture
async def store(store_factory: StoreFactory) -> ConformanceStore:
    """A fresh, open store of the backend under test (closed at teardown)."""
    return await store_factory()
