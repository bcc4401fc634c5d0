"""Shared fixtures: real ``sepp serve`` processes on loopback ports over real SQLite files
(``support.servers``: ``server_factory``, ``server``, the per-module ``shared_server`` and
``fresh_queue``; importing them here registers them for every test). Helpers shared by the
tests live in the ``support`` package (tests/support).
"""

from __future__ import annotations

import os

for _name in [n for n in os.environ if n.startswith("SEPP_")]:
    del os.environ[_name]

from support.servers import fresh_queue, server, server_factory, shared_server  # noqa: E402, F401  (fixtures)
