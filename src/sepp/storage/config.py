"""What ``open_store`` reads to build a backend (issue 9 item 2).

Storage sits below the server (it never imports ``sepp.server``), so the factory does not
take ``ServerConfig`` as such: it takes anything with the few attributes of ``StoreConfig``
— ``ServerConfig`` has them, and so can a test's small dataclass. Each backend's own
settings are one pydantic model, a table of its own in the server's TOML file:
``[sqlite]`` is ``SQLiteSettings`` (``SEPP_SQLITE__CACHE_MIB=128`` in the environment).
Settings every backend reads (``persist_mode``, ``group_commit_wait``,
``debug_commit_delay``) stay at the top level, like ``storage`` that picks the backend.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field

from sepp.limits import HOUR

#: The backends ``open_store`` knows (``storage`` key; issue 10 adds ``"postgres"``).
STORAGES = ("sqlite",)

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


#: Old top-level key → its key in ``[sqlite]`` (issue 9 item 2: migrated with a warning).
LEGACY_SQLITE_KEYS: dict[str, str] = {"sqlite_writer": "writer", "cache_mib": "cache_mib",
                                      "async_fsync_interval": "async_fsync_interval"}


class StoreConfig(Protocol):
    """What ``open_store`` reads; ``sepp.server.config.ServerConfig`` is one.

    ``storage`` names the backend (``STORAGES``); ``data_dir`` is the SQLite data folder;
    ``persist_mode`` is ``sync`` | ``group`` | ``async`` (SPEC §5); ``group_commit_wait`` the
    seconds group commit waits to gather writes; ``debug_commit_delay`` the seconds slept
    before each commit (a test knob, 0 in production); ``sqlite`` the ``[sqlite]`` table.
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
