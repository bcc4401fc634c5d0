"""Shared fixtures: real ``sepp serve`` processes on loopback ports over real SQLite files
(``support.servers``: ``server_factory``, ``server``, the per-module ``shared_server`` and
``fresh_queue``, all on the module-scoped ``backend`` — SQLite and PostgreSQL; importing
them here registers them for every test). Helpers shared by the
tests live in the ``support`` package (tests/support).

At the end of the session the PostgreSQL schemas the tests created
(``support.backends.CREATED_SCHEMAS``) are dropped; a failure there is only a warning.

A local run (no ``CI=true``) that cannot reach PostgreSQL skips the tests that need it and
ends with one line saying how to enable them (``support.backends.postgres_missing``); under
CI they fail instead.
"""

from __future__ import annotations

import asyncio
import os
import warnings
from collections.abc import Iterator
from typing import Any

import pytest

for _name in [n for n in os.environ if n.startswith("SEPP_")]:
    del os.environ[_name]

from support.backends import (  # noqa: E402
    POSTGRES_SKIPPED,
    drop_schemas,
    postgres_missing,
    skip_postgres_when_missing,
)
from support.servers import (  # noqa: E402, F401  (fixtures)
    backend,
    deselect_sqlite_only,
    fresh_queue,
    server,
    server_factory,
    shared_server,
)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Deselect the ``[postgres]`` variants of the tests marked ``sqlite_only`` (every test
    that does not depend on SQLite runs on both backends; those that do run on SQLite alone,
    deselected rather than skipped); then, on a local run without PostgreSQL, skip the tests
    that need it."""
    deselect_sqlite_only(config, items)
    skip_postgres_when_missing(items)


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """The one line a local run without PostgreSQL ends with: how many tests it skipped for
    that and how to run them (the reason of the first; counted from the reports, so it works
    with xdist workers too)."""
    reasons = [str(report.longrepr[2]) for report in terminalreporter.stats.get("skipped", [])
               if isinstance(report.longrepr, tuple) and POSTGRES_SKIPPED in str(report.longrepr[2])]
    if reasons:
        why = reasons[0].removeprefix("Skipped: ")
        terminalreporter.write_line(f"{len(reasons)} PostgreSQL tests skipped: {why}", yellow=True, bold=True)


@pytest.fixture(scope="session", autouse=True)
def _drop_test_schemas() -> Iterator[None]:
    """After the last test: drop every PostgreSQL schema ``store_settings("postgres")``
    named (each test its own schema). Tolerates a database that is gone; does nothing on a
    local run without PostgreSQL (nothing was created, and the skip line said why)."""
    yield
    if postgres_missing() is not None:
        return
    try:
        asyncio.run(drop_schemas())
    except Exception as exc:  # cleanup only: never fail the run for it
        warnings.warn(f"could not drop the test schemas: {exc}", stacklevel=1)
