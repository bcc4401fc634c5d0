"""pytest fixtures for applications built on sepp: a real ``sepp serve`` on a temporary folder.

Enable them in your ``conftest.py``::

    pytest_plugins = ["sepp.testing.fixtures"]

then ask for them in a test::

    def test_welcome_is_sent(sepp_server, monkeypatch):
        monkeypatch.setenv("SEPP_SERVER", sepp_server.grpc_target)   # where sepp.App() and Client() connect
        ...

* ``sepp_server``: a started ``ServerProcess`` (SQLite in pytest's ``tmp_path``, free loopback
  ports for gRPC and HTTP; ``grpc_target``, ``http_url``), stopped after the test.
* ``sepp_server_config``: the ServerConfig keys it starts with (a dict; override the fixture
  in your conftest to change them — short sweeps by default, so scheduled jobs and expired
  leases are seen quickly).

A real server, not a fake: what a test sees is what production does (docs/tasks.md
"Testing" compares it with eager mode). Starting one takes about a second.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sepp.testing.process import ServerProcess

#: The config ``sepp_server_config`` gives by default: sweeps every 50 ms, a short stop.
TEST_SERVER_CONFIG: dict[str, Any] = {"sweep_interval": 0.05, "shutdown_grace": 5.0}


@pytest.fixture
def sepp_server_config() -> dict[str, Any]:
    """ServerConfig keys of ``sepp_server`` (nested dicts for ``queues``, ``limits``,
    ``queue_defaults``); ``TEST_SERVER_CONFIG`` unless overridden."""
    return dict(TEST_SERVER_CONFIG)


@pytest.fixture
def sepp_server(tmp_path: Path, sepp_server_config: dict[str, Any]) -> Iterator[ServerProcess]:
    """A real ``sepp serve`` on ``tmp_path / "sepp"``, started before the test and stopped
    (SIGTERM, then SIGKILL if it hangs) after it. Raises ``RuntimeError`` when it cannot start."""
    with ServerProcess(tmp_path / "sepp", sepp_server_config) as server:
        yield server


__all__ = ["TEST_SERVER_CONFIG", "sepp_server", "sepp_server_config"]
