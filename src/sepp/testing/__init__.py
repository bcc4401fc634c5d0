"""Test helpers shipped to users (STYLE habit 14): run a real sepp server process
(``ServerProcess``); pytest fixtures that start one per test are in ``sepp.testing.fixtures``
(``pytest_plugins = ["sepp.testing.fixtures"]``)."""

from __future__ import annotations

from sepp.testing.process import ServerProcess, free_port

__all__ = ["ServerProcess", "free_port"]
