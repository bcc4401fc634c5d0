"""Real ``sepp serve`` processes for the tests, on loopback ports, on each storage backend.

* ``backend`` is the storage backend of a test's servers: module-scoped and parametrized over
  ``SERVER_BACKENDS`` (``sqlite`` and ``postgres``), so every test that asks
  for a server (directly or through the fixtures below) runs once per backend, ids ending
  ``[sqlite]`` / ``[postgres]``. A test (or a module, through ``pytestmark``) marked
  ``@pytest.mark.sqlite_only(reason=…)`` depends on SQLite itself (its data folder, the
  ``sepp.db`` file, the writer process…): its ``[postgres]`` variant is deselected at
  collection (``deselect_sqlite_only``), never skipped.
* ``server_factory(config=None, **kw)`` starts a server with the given ServerConfig keys
  (nested dicts for ``limits``/``queues``/``queue_defaults``) in a fresh data folder — on
  PostgreSQL also in a fresh schema (``backend_config``); a server started again with
  ``data_dir=`` of an earlier one gets that one's schema too — and stops it after the test.
* ``server`` is one default server: non-strict, group commit, fast sweeps.
* ``shared_server`` is the same default server, but one per test module (and backend): a
  test opts in by asking for it instead of ``server``. Only for tests that need *a* default
  server and use queue names no other test of the module uses (nothing that restarts or
  crashes the server, changes its config, reads its data folder, or counts every job/queue
  in it). ``module_server(tmp_path_factory, backend, **config)`` builds such a fixture with a
  config.
* ``fresh_queue`` is a queue name no other test uses, for tests on a shared server.

Every PostgreSQL schema named here comes from ``support.backends.fresh_schema``, so the
session cleanup of tests/conftest.py drops it. tests/conftest.py imports the fixtures and
the collection hook, which registers them for every test.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from sepp.client.target import has_reached
from sepp.testing import ServerProcess, free_port
from support.backends import BACKENDS, PG_TEST_DSN, fresh_schema

#: Config every test server gets unless the test says otherwise: short sweep interval
#: so lease expiry and promotion are observed quickly (SPEC §3 timing rules).
FAST = {"sweep_interval": 0.05, "shutdown_grace": 5.0}

#: The backends the process-level suites run against: those of
#: ``support.backends.BACKENDS`` but ``sqlite-process`` (``sepp serve`` in group mode already
#: runs the SQLite writer in a process of its own).
SERVER_BACKENDS = [b for b in BACKENDS if b != "sqlite-process"]

#: The marker of a test that depends on SQLite itself (registered in pyproject.toml).
SQLITE_ONLY = "sqlite_only"
#: The marker of a test that needs PostgreSQL itself: its SQLite variants are deselected.
POSTGRES_ONLY = "postgres_only"
#: The marker of a test that needs the SQLite writer in the test's own process (it moves a
#: fake clock the writer reads, or holds the writer thread): its ``[sqlite-process]`` variant
#: is deselected.
WRITER_IN_PROCESS = "writer_in_process"

#: The ``server_factory`` fixture: ServerConfig keys → a started server.
ServerFactory = Callable[..., ServerProcess]


def unreached_port() -> int:
    """A port that was free a moment ago on 127.0.0.1 and that no call of this test process
    ever reached a server at (an earlier test's server may have had it): a client's first
    call to it is a first contact, which fails fast when nothing listens
    (``sepp.client.target``)."""
    while True:
        port = free_port()
        if not has_reached(f"127.0.0.1:{port}"):
            return port


def backend_config(backend: str, schema: str | None = None) -> dict[str, Any]:
    """The ServerConfig keys that put a server on ``backend``: nothing for ``sqlite`` (the
    default: a data folder, the writer in its own process in group mode); for ``postgres``
    ``storage``, ``postgres_dsn`` (``PG_TEST_DSN``) and ``postgres = {schema = …}`` — ``schema``
    if given (a server started again on the same data), else a fresh one
    (``fresh_schema``, dropped at the end of the session). Raises ``AssertionError`` for an
    unknown backend."""
    if backend == "sqlite":
        return {}
    if backend == "postgres":
        return {"storage": "postgres", "postgres_dsn": PG_TEST_DSN, "postgres": {"schema": schema or fresh_schema()}}
    raise AssertionError(f"unknown server backend {backend!r}")


@pytest.fixture(scope="module", params=SERVER_BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    """The storage backend of this test's servers: ``"sqlite"`` or ``"postgres"``. Module
    scope, so a module's shared servers are started once per backend."""
    return str(request.param)


def deselect_sqlite_only(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Drop the ``[postgres]`` variants of the tests marked ``sqlite_only``, the SQLite
    variants (``[sqlite]``, ``[sqlite-process]``) of those marked ``postgres_only``, and the
    ``[sqlite-process]`` variants of those marked ``writer_in_process`` from ``items`` (in
    place), and report them through ``pytest_deselected`` (so ``-q`` counts them as
    deselected, never skipped). A test parametrized over another fixture's ``backend`` (the
    conformance suite's) is left alone unless it carries a marker."""
    kept: list[pytest.Item] = []
    dropped: list[pytest.Item] = []
    for item in items:
        callspec = getattr(item, "callspec", None)
        # ``backend``: the servers' and conformance fixtures; ``make_harness``: the engine suite's.
        backend = (callspec.params.get("backend", callspec.params.get("make_harness"))
                   if callspec is not None else None)
        drop = (backend == "postgres" and item.get_closest_marker(SQLITE_ONLY) is not None) or \
            (backend in ("sqlite", "sqlite-process") and item.get_closest_marker(POSTGRES_ONLY) is not None) or \
            (backend == "sqlite-process" and item.get_closest_marker(WRITER_IN_PROCESS) is not None)
        (dropped if drop else kept).append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept


@pytest.fixture
def server_factory(tmp_path: Path, backend: str) -> Iterator[ServerFactory]:
    """Start servers on demand on this test's ``backend``; every one is stopped at teardown.
    A server given the ``data_dir`` of an earlier one (same test) shares its PostgreSQL
    schema, as it would share its SQLite file."""
    started: list[ServerProcess] = []
    schemas: dict[Path, dict[str, Any]] = {}
    counter = iter(range(1000))

    def make(config: dict[str, Any] | None = None, *, data_dir: Path | None = None, **kw: Any) -> ServerProcess:
        folder = Path(data_dir or tmp_path / f"sepp-{next(counter)}")
        store = schemas.get(folder.resolve())
        if store is None:
            store = schemas[folder.resolve()] = backend_config(backend)
        proc = ServerProcess(folder, {**FAST, **store, **(config or {}), **kw})
        started.append(proc)
        return proc.start()

    yield make
    for proc in started:
        try:
            proc.terminate(timeout=15)
        except Exception:
            pass
        proc.kill()


@pytest.fixture
def server(server_factory: ServerFactory) -> ServerProcess:
    """A default, non-strict server in group mode."""
    return server_factory()


@pytest.fixture(scope="module")
def shared_server(tmp_path_factory: pytest.TempPathFactory, backend: str) -> Iterator[ServerProcess]:
    """One default server (``FAST`` config) for every opted-in test of a module, per backend.

    Saves one server start and stop (about 1.3–2 s) per test. Tests that use it must keep
    to queue names of their own and must not depend on server-wide state (see module doc).
    """
    yield from module_server(tmp_path_factory, backend)


@pytest.fixture
def fresh_queue() -> str:
    """A queue name of this test's own (``q-`` + 12 hex digits): on a shared server no other
    test has put jobs in it, so counts and delivery order are the test's alone."""
    return f"q-{uuid.uuid4().hex[:12]}"


def module_server(tmp_path_factory: pytest.TempPathFactory, backend: str, **config: Any) -> Iterator[ServerProcess]:
    """Body of a module-scoped server fixture: a server on ``backend`` (the module-scoped
    ``backend`` fixture's value; on PostgreSQL a fresh schema) with ``FAST`` plus ``config``
    (ServerConfig keys) in a fresh data folder, started, yielded once, then stopped.

    ``shared_server`` uses it with no config; a module whose tests all need the same
    non-default server (small limits, strict mode) yields from it in its own fixture
    instead of restarting a fresh ``server`` in every test.
    """
    with ServerProcess(tmp_path_factory.mktemp("sepp-shared"), {**FAST, **backend_config(backend), **config}) as proc:
        yield proc
