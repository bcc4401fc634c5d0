"""The storage backends every backend-independent test runs against.

``BACKENDS`` names them; ``store_settings(backend)`` gives the config keys that select and
tune one (``storage`` and its table), to spread into a ``ServerConfig`` or the conformance
suite's small store config. The conformance suite (tests/storage/conftest.py) and the
engine-level tests (tests/engine/conftest.py) are parametrized over ``BACKENDS``: adding a
backend means one entry here and one branch in ``store_settings``.

* ``sqlite``: the embedded default, the writer in a thread (fast to start).
* ``sqlite-process``: the writer in its own process (what ``sepp serve`` runs in group
  mode): every operation and result crosses a process boundary, so one that does not pickle
  fails. ~0.5 s a store instead of 0.01 s, so it joins only with ``CONFORMANCE_ALL=1`` (not
  a ``SEPP_`` name: tests/conftest.py clears those).
* ``postgres``: the PostgreSQL backend on the database ``PG_TEST_DSN`` (default
  ``postgresql://postgres@127.0.0.1:5432/test``; again not a ``SEPP_`` name). Under CI
  (``CI=true``) the PostgreSQL run is required: a database that cannot be reached fails the
  tests rather than skipping them (.ci/run makes sure it answers). A local run without it
  skips the tests that need it (``needs_postgres``) and says once how to enable them
  (``postgres_missing``, tests/conftest.py; docs/decisions.md "A first run without
  PostgreSQL"). Every call
  of ``store_settings("postgres")`` names a fresh schema (``fresh_schema``), so each test
  — each store factory — starts on an empty database; the names are kept in
  ``CREATED_SCHEMAS`` and dropped at the end of the session (``drop_schemas``, called by
  tests/conftest.py).
"""

from __future__ import annotations

import asyncio
import functools
import itertools
import os
import secrets
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from sepp.storage.config import PostgresSettings, SQLiteSettings

#: Every backend the backend-independent tests run against.
BACKENDS = ["sqlite", "postgres"] + (["sqlite-process"] if os.environ.get("CONFORMANCE_ALL") == "1" else [])

#: The PostgreSQL database the tests use (each test in a schema of its own).
PG_TEST_DSN = os.environ.get("PG_TEST_DSN") or "postgresql://postgres@127.0.0.1:5432/test"

#: The start of the reason every PostgreSQL test skipped by a local run carries.
POSTGRES_SKIPPED = "PostgreSQL not reachable"


@functools.cache
def postgres_missing() -> str | None:
    """None when PostgreSQL is required or answers; else the one-line reason a local run
    skips the tests that need it: what failed and how to enable them.

    Required means ``CI=true`` (the CI run fails on a missing database, as before). Otherwise
    one plain asyncpg connection to ``PG_TEST_DSN`` is tried (5 s timeout) once per process."""
    if os.environ.get("CI", "").lower() == "true":
        return None

    async def probe() -> None:
        import asyncpg

        conn = await asyncpg.connect(PG_TEST_DSN, timeout=5)
        await conn.close()

    try:
        asyncio.run(probe())
    except Exception as exc:
        why = f"{type(exc).__name__}: {exc}".splitlines()[0][:160]
        return (f"{POSTGRES_SKIPPED} at {PG_TEST_DSN} ({why}); to run these tests start PostgreSQL with a database "
                "`test` (trust auth for user postgres) or set PG_TEST_DSN to one; CI=true makes this a failure")
    return None


def needs_postgres(item: pytest.Item) -> bool:
    """Whether ``item`` needs the PostgreSQL database: its ``[postgres]`` variant (any
    parameter whose value is ``"postgres"``), a test marked ``postgres_only``, or a test of
    the multi-node suite (``cluster_factory``, tests/cluster)."""
    callspec = getattr(item, "callspec", None)
    if callspec is not None and "postgres" in callspec.params.values():
        return True
    return (item.get_closest_marker("postgres_only") is not None
            or "cluster_factory" in getattr(item, "fixturenames", ()))


def skip_postgres_when_missing(items: list[pytest.Item]) -> None:
    """On a local run without PostgreSQL (``postgres_missing``), mark every item that
    ``needs_postgres`` skipped with that reason; otherwise leave ``items`` alone."""
    needing = [item for item in items if needs_postgres(item)]
    reason = postgres_missing() if needing else None
    if reason is not None:
        for item in needing:
            item.add_marker(pytest.mark.skip(reason=reason))


#: Every schema ``fresh_schema`` named in this process, dropped by ``drop_schemas``.
CREATED_SCHEMAS: list[str] = []
_counter = itertools.count(1)


def fresh_schema() -> str:
    """A schema name no other test (of this run, or of another run at the same time) uses:
    ``t<pid>_<n>_<8 hex>``, a plain lower-case SQL name (``[postgres] schema`` rule).
    Recorded in ``CREATED_SCHEMAS`` for the cleanup at the end of the session."""
    name = f"t{os.getpid()}_{next(_counter)}_{secrets.token_hex(4)}"
    CREATED_SCHEMAS.append(name)
    return name


#: The schemas ``fresh_schema`` names, of any run.
_TEST_SCHEMAS = r"SELECT nspname FROM pg_namespace WHERE nspname ~ '^t[0-9]+_[0-9]+_[0-9a-f]+$'"


def _run_gone(pid: int) -> bool:
    """Whether the test run of process ``pid`` has ended (and is not this one)."""
    return pid != os.getpid() and not os.path.exists(f"/proc/{pid}")


async def drop_schemas(dsn: str = PG_TEST_DSN) -> None:
    """``DROP SCHEMA … CASCADE`` every name of ``CREATED_SCHEMAS`` (those never created
    are skipped by ``IF EXISTS``) over one plain asyncpg connection, then forget them; also
    the test schemas (``t<pid>_…``) of earlier runs whose process is gone (a run that was
    killed never dropped its own). Raises what asyncpg raises when the database cannot be
    reached (the caller tolerates it)."""
    import asyncpg

    conn = await asyncpg.connect(dsn, timeout=10)
    try:
        # A schema whose tables a stray session still locks is left for a later run rather
        # than hanging the session's teardown (each DROP gives up after this long).
        await conn.execute("SET lock_timeout = '15s'")
        for (name,) in await conn.fetch(_TEST_SCHEMAS):
            if _run_gone(int(name[1:].split("_", 1)[0])):
                await conn.execute(f"DROP SCHEMA IF EXISTS {name} CASCADE")
        while CREATED_SCHEMAS:
            await conn.execute(f"DROP SCHEMA IF EXISTS {CREATED_SCHEMAS[-1]} CASCADE")
            CREATED_SCHEMAS.pop()
    finally:
        await conn.close()


def store_settings(backend: str) -> dict[str, Any]:
    """The config keys selecting ``backend`` (``storage`` plus its settings table; for
    ``postgres`` also ``postgres_dsn`` and a fresh schema per call). Raises
    ``AssertionError`` for a name not in ``BACKENDS``' vocabulary."""
    if backend in ("sqlite", "sqlite-process"):
        return {"storage": "sqlite",
                "sqlite": SQLiteSettings(writer="process" if backend == "sqlite-process" else "thread")}
    if backend == "postgres":
        return {"storage": "postgres", "postgres_dsn": PG_TEST_DSN, "postgres": PostgresSettings(schema=fresh_schema())}
    raise AssertionError(f"unknown backend {backend!r}")


@dataclass(frozen=True)
class StoreSettings:
    """What ``open_store`` reads (``storage.config.StoreConfig``), without the server's whole
    config: the conformance suite's stores and the factory's own tests build one."""

    data_dir: Path = Path("unused")
    storage: str = "sqlite"
    persist_mode: str = "group"
    group_commit_wait: float = 0.004
    debug_commit_delay: float = 0.0
    sqlite: SQLiteSettings = field(default_factory=SQLiteSettings)
    postgres_dsn: str = ""
    postgres: PostgresSettings = field(default_factory=PostgresSettings)
    node_name: str = ""
