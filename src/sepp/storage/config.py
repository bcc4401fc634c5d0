"""What ``open_store`` reads to build a backend.

Storage sits below the server (it never imports ``sepp.server``), so the factory does not
take ``ServerConfig`` as such: it takes anything with the few attributes of ``StoreConfig``
— ``ServerConfig`` has them, and so can a test's small dataclass. Each backend's own
settings are one pydantic model, a table of its own in the server's TOML file:
``[sqlite]`` is ``SQLiteSettings`` (``SEPP_SQLITE__CACHE_MIB=128`` in the environment),
``[postgres]`` is ``PostgresSettings`` (``SEPP_POSTGRES__POOL_SIZE=20``).
Settings every backend reads (``persist_mode``, ``group_commit_wait``,
``debug_commit_delay``, ``node_name``) stay at the top level, like ``storage`` that picks
the backend and ``postgres_dsn`` (``SEPP_POSTGRES_DSN``: where the database is, not how to
tune it).

This module imports no driver (no asyncpg): the server's config reads it at start.
"""

from __future__ import annotations

import re
import warnings
from pathlib import Path
from typing import Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field, field_validator

from sepp.limits import HOUR

#: The backends ``open_store`` knows (``storage`` key; ``"postgres"`` for several nodes).
STORAGES = ("sqlite", "postgres")

#: What ``[postgres] schema`` accepts: a plain lower-case SQL identifier of at most 63
#: characters (PostgreSQL's NAMEDATALEN - 1), so it never needs quoting in SQL. The same
#: rule as ``sepp.storage.postgres.schema.SCHEMA_NAME`` (kept here so that reading the
#: config never imports asyncpg).
SCHEMA_NAME_PATTERN = r"^[a-z_][a-z0-9_]{0,62}$"
_SCHEMA_NAME = re.compile(SCHEMA_NAME_PATTERN)

#: ``[sqlite] writer``: where the SQLite writer runs.
WriterPlacement = Literal["auto", "process", "thread"]


class ConfigError(ValueError):
    """The configuration is invalid (bad file, bad value, contradictory or unknown keys).

    Raised by ``sepp.server.config.load_config`` (which re-exports it) and by ``open_store``
    for a ``storage`` it does not know; the message is one line naming the key."""


class SQLiteSettings(BaseModel):
    """The ``[sqlite]`` table: settings only the SQLite backend reads. Durations seconds.

    The old top-level names (``sqlite_writer``, ``cache_mib``, ``async_fsync_interval``) are
    still accepted by ``ServerConfig``, moved here with a warning (``LEGACY_SQLITE_KEYS``).
    """

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    #: Where the SQLite writer runs: "process" (a child process of its own, so it never waits
    #: for the server's interpreter lock), "thread" (in this process), or "auto": process in
    #: group and async mode, thread in sync mode (docs/decisions.md).
    writer: WriterPlacement = "auto"
    #: SQLite page cache of the writer, MiB.
    cache_mib: int = Field(default=64, ge=1, le=1024 * 1024)
    #: Background fsync period in async mode, seconds.
    async_fsync_interval: float = Field(default=0.05, gt=0, le=HOUR)

    def placement(self, persist_mode: str) -> Literal["process", "thread"]:
        """``writer`` with ``auto`` resolved for ``persist_mode``: ``thread`` in sync mode,
        else ``process``."""
        if self.writer != "auto":
            return self.writer
        return "thread" if persist_mode == "sync" else "process"


#: Old top-level key → its key in ``[sqlite]`` (migrated with a warning).
LEGACY_SQLITE_KEYS: dict[str, str] = {"sqlite_writer": "writer", "cache_mib": "cache_mib",
                                      "async_fsync_interval": "async_fsync_interval"}


with warnings.catch_warnings():
    # ``schema`` is the TOML key users write; it shadows pydantic's deprecated
    # ``BaseModel.schema()`` classmethod, which sepp never calls.
    warnings.filterwarnings("ignore", message='Field name "schema"', category=UserWarning)

    class PostgresSettings(BaseModel):
        """The ``[postgres]`` table: settings only the PostgreSQL backend reads
        (env ``SEPP_POSTGRES__SCHEMA`` / ``__POOL_SIZE`` / ``__WRITERS``). The database itself
        is the top-level ``postgres_dsn``. Counts are connections per node (per ``sepp serve``
        process): a cluster of N nodes holds up to N × (``pool_size`` + ``writers``) + N
        (one LISTEN connection each) connections — keep that under PostgreSQL's
        ``max_connections`` (docs/deploying.md).
        """

        model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

        #: The PostgreSQL schema (namespace) holding sepp's tables, created and migrated at
        #: start: a plain lower-case SQL name (``SCHEMA_NAME_PATTERN``). Several clusters may
        #: share one database under different schemas.
        schema: str = "sepp"  # type: ignore[assignment]
        #: Read connections per node (reserve long-polls, listings, stats), 1..1000.
        pool_size: int = Field(default=10, ge=1, le=1000)
        #: Write connections per node, 1..256: group commit folds the writes waiting at the
        #: same moment into one transaction per connection.
        writers: int = Field(default=4, ge=1, le=256)

        @field_validator("schema")
        @classmethod
        def _check_schema(cls, value: str) -> str:
            """A plain lower-case SQL name: letters a-z, digits, ``_``; not starting with a
            digit; 1..63 characters."""
            if not _SCHEMA_NAME.match(value):
                raise ValueError("must be a plain lower-case SQL name: a-z, 0-9 and _, not starting with "
                                 "a digit, at most 63 characters")
            return value


class StoreConfig(Protocol):
    """What ``open_store`` reads; ``sepp.server.config.ServerConfig`` is one.

    ``storage`` names the backend (``STORAGES``); ``data_dir`` is the SQLite data folder;
    ``persist_mode`` is ``sync`` | ``group`` | ``async``; ``group_commit_wait`` the
    seconds group commit waits to gather writes; ``debug_commit_delay`` the seconds slept
    before each commit (a test knob, 0 in production); ``sqlite`` the ``[sqlite]`` table;
    ``postgres_dsn`` the PostgreSQL database (``postgresql://USER@HOST:PORT/DB``) and
    ``postgres`` the ``[postgres]`` table; ``node_name`` this node's name (empty:
    the host name), which the PostgreSQL backend records for the cluster's node list.
    """

    @property
    def storage(self) -> str:
        """The backend's name."""

    @property
    def data_dir(self) -> Path:
        """Folder of the SQLite database."""

    @property
    def persist_mode(self) -> str:
        """``sync``, ``group`` or ``async``."""

    @property
    def group_commit_wait(self) -> float:
        """Seconds group commit waits to gather concurrent writes into one commit."""

    @property
    def debug_commit_delay(self) -> float:
        """Seconds slept before every commit (fault injection for tests)."""

    @property
    def sqlite(self) -> SQLiteSettings:
        """The ``[sqlite]`` settings."""

    @property
    def postgres_dsn(self) -> str:
        """The PostgreSQL database, ``postgresql://USER[:PASSWORD]@HOST:PORT/DB`` (empty
        unless ``storage`` is ``postgres``)."""

    @property
    def postgres(self) -> PostgresSettings:
        """The ``[postgres]`` settings."""

    @property
    def node_name(self) -> str:
        """This node's name; empty means the host name."""
