"""Storage errors. Driver errors are wrapped here, at the boundary, with the cause kept
(STYLE habit 6); the engine decides what they mean."""

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
