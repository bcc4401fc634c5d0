"""Storage errors (``sepp.domain.store_errors``), re-exported for the drivers: driver errors
are wrapped in these at the boundary, with the cause kept (STYLE habit 6); the engine
decides what they mean."""

from __future__ import annotations

from sepp.domain.store_errors import (
    DependencyMissing,
    StoreClosed,
    StoreCorrupt,
    StoreError,
    StoreFailed,
    StoreLocked,
    StoreUnavailable,
)

__all__ = ["DependencyMissing", "StoreClosed", "StoreCorrupt", "StoreError", "StoreFailed", "StoreLocked",
           "StoreUnavailable"]
