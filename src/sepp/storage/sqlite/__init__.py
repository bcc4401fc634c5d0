"""Embedded SQLite backend: one writer connection owned by the committer thread (WAL).

``SQLiteStore`` is loaded on first access (PEP 562, ``sepp._lazy``), so that ``sepp serve``
can import ``writer_process`` and start the writer process (``writer_process.prespawn``)
before it imports the store and the server.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sepp import _lazy

if TYPE_CHECKING:
    from sepp.storage.sqlite.store import SQLiteStore

__all__ = ["SQLiteStore"]
_EXPORTS = {"SQLiteStore": "sepp.storage.sqlite.store"}


def __getattr__(name: str) -> Any:
    return _lazy.load(globals(), name, _EXPORTS)


def __dir__() -> list[str]:
    return _lazy.names(globals())
