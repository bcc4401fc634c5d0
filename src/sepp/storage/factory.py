"""``open_store``: the one place a storage backend is chosen and built (issue 9 item 2).

The server imports this module, ``storage.base`` and the domain — never a driver — so a new
backend is a new branch here plus its driver package, and the server does not change.
"""

from __future__ import annotations

from sepp.domain.clock import SYSTEM_CLOCK, Clock
from sepp.storage.base import Store
from sepp.storage.config import STORAGES, ConfigError, StoreConfig
from sepp.storage.sqlite import SQLiteStore


def open_store(config: StoreConfig, clock: Clock = SYSTEM_CLOCK) -> Store:
    """Build the backend ``config.storage`` names from ``config`` (``StoreConfig``: e.g. a
    ``ServerConfig``), not opened yet: the caller runs ``await store.open()`` (lock, schema,
    writer) and ``await store.close()``.

    ``clock`` is the server's clock, for a backend that reads the time itself; the SQLite
    store reads none (every operation takes its ``now``, µs UTC, from the caller).

    Raises ``ConfigError`` (one line) for a ``storage`` this build does not know, and
    ``ValueError`` for a setting the backend refuses.
    """
    if config.storage == "sqlite":
        s = config.sqlite
        return SQLiteStore(config.data_dir, config.persist_mode, cache_mib=s.cache_mib,
                           fsync_interval=s.async_fsync_interval, commit_delay=config.debug_commit_delay,
                           group_wait=config.group_commit_wait, writer=s.placement(config.persist_mode))
    known = ", ".join(repr(name) for name in STORAGES)
    raise ConfigError(f"storage: unknown backend {config.storage!r} (this build knows {known})")
