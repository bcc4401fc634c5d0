"""Real ``sepp serve`` processes for the tests, on loopback ports over real SQLite files.

* ``server_factory(config=None, **kw)`` starts a server with the given ServerConfig keys
  (nested dicts for ``limits``/``queues``/``queue_defaults``) in a fresh data folder
  and stops it after the test.
* ``server`` is one default server: non-strict, group commit, fast sweeps.
* ``shared_server`` is the same default server, but one per test module: a test opts in by
  asking for it instead of ``server``. Only for tests that need *a* default server and use
  queue names no other test of the module uses (nothing that restarts or crashes the server,
  changes its config, reads its data folder, or counts every job/queue in it).
  ``module_server(tmp_path_factory, **config)`` builds such a fixture with a config.
* ``fresh_queue`` is a queue name no other test uses, for tests on a shared server.

tests/conftest.py imports the fixtures, which registers them for every test.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from sepp.testing import ServerProcess

#: Config every test server gets unless the test says otherwise: short sweep interval
#: so lease expiry and promotion are observed quickly (SPEC §3 timing rules).
FAST = {"sweep_interval": 0.05, "shutdown_grace": 5.0}

#: The ``server_factory`` fixture: ServerConfig keys → a started server.
ServerFactory = Callable[..., ServerProcess]


@pytest.fixture
def server_factory(tmp_path: Path) -> Iterator[ServerFactory]:
    """Start servers on demand; every one is stopped at teardown."""
    started: list[ServerProcess] = []
    counter = iter(range(1000))

    def make(config: dict[str, Any] | None = None, *, data_dir: Path | None = None, **kw: Any) -> ServerProcess:
        folder = data_dir or tmp_path / f"sepp-{next(counter)}"
        proc = ServerProcess(folder, {**FAST, **(config or {}), **kw})
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
def shared_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """One default server (``FAST`` config) for every opted-in test of a module.

    Saves one server start and stop (about 1.3–2 s) per test. Tests that use it must keep
    to queue names of their own and must not depend on server-wide state (see module doc).
    """
    yield from module_server(tmp_path_factory)


@pytest.fixture
def fresh_queue() -> str:
    """A queue name of this test's own (``q-`` + 12 hex digits): on a shared server no other
    test has put jobs in it, so counts and delivery order are the test's alone."""
    return f"q-{uuid.uuid4().hex[:12]}"


def module_server(tmp_path_factory: pytest.TempPathFactory, **config: Any) -> Iterator[ServerProcess]:
    """Body of a module-scoped server fixture: a server with ``FAST`` plus ``config``
    (ServerConfig keys) in a fresh data folder, started, yielded once, then stopped.

    ``shared_server`` uses it with no config; a module whose tests all need the same
    non-default server (small limits, strict mode) yields from it in its own fixture
    instead of restarting a fresh ``server`` in every test.
    """
    with ServerProcess(tmp_path_factory.mktemp("sepp-shared"), {**FAST, **config}) as proc:
        yield proc
