"""The errors a store raises. Driver errors are wrapped in these at the storage boundary,
with the cause kept (STYLE habit 6); the engine decides what they mean.

They live in the domain, not in ``sepp.storage``, because the layers above the seam catch
them — the web UI shows a 503 page for one, the RPC edge maps them to gRPC codes — and
those layers do not import the storage seam (the ``http-rpc-no-storage`` contract);
``sepp.storage.errors`` re-exports them for the drivers.
"""

from __future__ import annotations


class StoreError(Exception):
    """The store failed."""


class StoreClosed(StoreError):
    """The store is closed or closing; no new writes are taken."""


class StoreCorrupt(StoreError):
    """The data directory holds something this version cannot read."""


class StoreLocked(StoreError):
    """Another process owns the data folder (its lock file is held)."""


class StoreFailed(StoreError):
    """The store can no longer write (its writer process ended unexpectedly); the server
    stops so that a supervisor can start it again."""


class StoreUnavailable(StoreError):
    """The database cannot be reached right now (PostgreSQL down or restarting, a
    connection lost mid-call): transient, the call may be retried (gRPC ``UNAVAILABLE``).
    A write that fails this way may or may not have committed; an acknowledged one has."""


class DependencyMissing(StoreError):
    """An enqueue named dependencies (``Store.enqueue``'s ``depends_on``) that are no stored
    job: nothing of the call was written. ``missing``: row index → the first such id of that
    row (16 bytes), for every row that named one."""

    def __init__(self, missing: dict[int, bytes]) -> None:
        super().__init__(missing)
        self.missing = missing

    def __str__(self) -> str:
        return f"dependencies not found: {', '.join(f'row {i}: {v.hex()}' for i, v in self.missing.items())}"
