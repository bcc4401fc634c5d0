"""Shared fixtures: real ``sepp serve`` processes on loopback ports over real SQLite files
(``support.servers``: ``server_factory``, ``server``, the per-module ``shared_server`` and
``fresh_queue``, all on the module-scoped ``backend`` — SQLite and PostgreSQL; importing
them here registers them for every test). Helpers shared by the
tests live in the ``support`` package (tests/support).

At the end of the session the PostgreSQL schemas the tests created
(``support.backends.CREATED_SCHEMAS``) are dropped; a failure there is only a warning.
"""

from __future__ import annotations

import asyncio
import os
import warnings
from collections.abc import Iterator

import pytest

for _name in [n for n in os.environ if n.startswith("SEPP_")]:
    del os.environ[_name]

from support.backends import drop_schemas  # noqa: E402
from support.servers import (  # noqa: E402, F401  (fixtures)
    backend,
    deselect_sqlite_only,
    fresh_queue,
    server,
    server_factory,
    shared_server,
)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Deselect the ``[postgres]`` variants of the tests marked ``sqlite_only`` (issue 10
    item 3: every test that does not depend on SQLite runs on both backends; those that do
    run on SQLite alone, deselected rather than skipped)."""
    deselect_sqlite_only(config, items)


@pytest.fixture(scope="session", autouse=True)
def _drop_test_schemas() -> Iterator[None]:
    """After the last test: drop every PostgreSQL schema ``store_settings("postgres")``
    named (issue 10 item 3: each test its own schema). Tolerates a database that is gone."""
    yield
    try:
        asyncio.run(drop_schemas())
    except Exception as exc:  # cleanup only: never fail the run for it
        warnings.warn(f"could not drop the test schemas: {exc}", stacklevel=1)
