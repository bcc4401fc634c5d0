"""``open_store``: the one place a storage backend is chosen and built.

The server imports this module, ``storage.base`` and the domain — never a driver — so a new
backend is a new branch here plus its driver package, and the server does not change. The
PostgreSQL driver is imported only when ``storage = "postgres"``, so a SQLite
server never loads asyncpg.
"""

from __future__ import annotations

import socket

from sepp.domain.clock import SYSTEM_CLOCK, Clock
from sepp.limits import QueueSettings, ServerLimits
from sepp.storage.base import Store
from sepp.storage.config import STORAGES, ConfigError, StoreConfig
from sepp.storage.sqlite import SQLiteStore


def open_store(config: StoreConfig, clock: Clock = SYSTEM_CLOCK) -> Store:
    """Build the backend ``config.storage`` names from ``config`` (``StoreConfig``: e.g. a
    ``ServerConfig``), not opened yet: the caller runs ``await store.open()`` (lock or
    connections, schema, writer) and ``await store.close()``.

    ``clock`` is the server's clock, for a backend that reads the time itself; the SQLite
    store reads none (every operation takes its ``now``, µs UTC, from the caller).

    * ``sqlite``: ``SQLiteStore`` over ``config.data_dir`` with the ``[sqlite]`` table.
    * ``postgres``: ``PostgresStore`` on ``config.postgres_dsn`` with the
      ``[postgres]`` table (schema, ``pool_size`` read and ``writers`` write connections),
      ``debug_commit_delay`` and the node name (``config.node_name``, else the host name),
      and, when ``config`` has them (a ``ServerConfig`` does), ``strict``, ``limits`` and
      ``queue_defaults`` for the SQL enqueue functions (``postgres.admission``).
      ``data_dir`` is not used.

    Raises ``ConfigError`` (one line) for a ``storage`` this build does not know or a
    ``postgres`` without ``postgres_dsn``, and ``ValueError`` for a setting the backend
    refuses.
    """
    if config.storage == "sqlite":
        s = config.sqlite
        return SQLiteStore(config.data_dir, config.persist_mode, cache_mib=s.cache_mib,
                           fsync_interval=s.async_fsync_interval, commit_delay=config.debug_commit_delay,
                           group_wait=config.group_commit_wait, writer=s.placement(config.persist_mode))
    if config.storage == "postgres":
        if not config.postgres_dsn.strip():
            raise ConfigError("postgres_dsn: must be set when storage is 'postgres' "
                              "(--postgres-dsn, env SEPP_POSTGRES_DSN), e.g. postgresql://USER@HOST:5432/DB")
        from sepp.storage.postgres import PostgresStore  # only a PostgreSQL server loads asyncpg
        from sepp.storage.postgres.admission import AdmissionSettings

        pg = config.postgres
        # The admission settings of a server's config (a test's small config may have none).
        strict, limits, defaults = (getattr(config, k, None) for k in ("strict", "limits", "queue_defaults"))
        admission = (AdmissionSettings(bool(strict), limits, defaults)
                     if isinstance(limits, ServerLimits) and isinstance(defaults, QueueSettings) else None)
        return PostgresStore(config.postgres_dsn, config.persist_mode, schema=pg.schema, pool_size=pg.pool_size,
                             writers=pg.writers, commit_delay=config.debug_commit_delay,
                             node=config.node_name or socket.gethostname(), clock=clock, admission=admission)
    known = ", ".join(repr(name) for name in STORAGES)
    raise ConfigError(f"storage: unknown backend {config.storage!r} (this build knows {known})")
