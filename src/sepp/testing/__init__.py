"""Test helpers shipped to users (STYLE habit 14): run a real sepp server process."""

from __future__ import annotations

from sepp.testing.process import ServerProcess, free_port

__all__ = ["ServerProcess", "free_port"]
