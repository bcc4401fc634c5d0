"""Embedded SQLite backend: one writer connection owned by the committer thread (WAL)."""

from __future__ import annotations

from sepp.storage.sqlite.store import SQLiteStore

__all__ = ["SQLiteStore"]
