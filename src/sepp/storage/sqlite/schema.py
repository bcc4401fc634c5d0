"""The writer connection of the SQLite backend: open, configure (WAL, synchronous, cache),
migrate the schema (the numbered scripts in ``migrations/``) and write-probe it."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from sepp.storage._sql import migrations
from sepp.storage.errors import StoreCorrupt, StoreError

_PKG = "sepp.storage.sqlite"


def connect_writer(path: Path, mode: str, cache_mib: int, up_to: int | None = None) -> sqlite3.Connection:
    """Open, configure, migrate and write-probe the writer connection of ``path`` (called
    where the writer loop runs: its thread, or the writer process). ``mode`` is the persist
    mode (``async`` runs with ``synchronous=OFF``), ``cache_mib`` the page cache in MiB.
    ``up_to`` is the highest schema version to migrate to: the migrations numbered above it
    are left out, as if this build knew none of them (a database already past it is
    refused). ``None``, the default, means every known migration; tests pass a number to
    build, or act as, an older version.

    Raises ``StoreCorrupt`` when the file is not a sepp database or its schema is newer than
    this build knows (or than ``up_to``), and ``StoreError`` when it cannot be written
    (read-only file, full disk, …).
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    # Prepared statements kept: multi-row INSERTs and batched acks have one text per batch
    # size (and shared-column mix); re-preparing a 256-row INSERT costs ~2 ms.
    try:
        conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False, cached_statements=256)
    except sqlite3.Error as exc:  # e.g. sepp.db is a folder, or the folder cannot be read
        raise StoreError(f"cannot open {path}: {exc}") from exc
    try:
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute(f"PRAGMA synchronous={'OFF' if mode == 'async' else 'FULL'}")
        conn.execute(f"PRAGMA cache_size=-{cache_mib * 1024}")
        conn.execute("PRAGMA temp_store=MEMORY")
        conn.execute("PRAGMA busy_timeout=10000")
        conn.execute("PRAGMA foreign_keys=OFF")
        _migrate(conn, up_to)
        # SQLite opens a read-only file quietly; find out now, not at the first enqueue.
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        conn.execute(f"PRAGMA user_version={int(version)}")
    except sqlite3.DatabaseError as exc:
        conn.close()
        text = str(exc)
        if "not a database" in text or "malformed" in text:
            raise StoreCorrupt(f"{path} is not a sepp database: {text}") from exc
        raise StoreError(f"cannot use {path}: {text}") from exc
    except BaseException:
        conn.close()
        raise
    return conn


def _migrate(conn: sqlite3.Connection, up_to: int | None = None) -> None:
    """Apply the migrations numbered above the database's ``user_version`` and at most
    ``up_to`` (``None``: every known one). Raises ``StoreCorrupt`` when the database is past
    the newest of them."""
    current = conn.execute("PRAGMA user_version").fetchone()[0]
    known = [m for m in migrations(_PKG) if up_to is None or m[0] <= up_to]
    latest = known[-1][0] if known else 0
    if current > latest:
        raise StoreCorrupt(f"database schema version {current} is newer than this sepp ({latest})")
    for number, _name, sql in known:
        if number <= current:
            continue
        # One script = one transaction: the schema change and the version bump land together.
        conn.executescript(f"BEGIN IMMEDIATE;\n{sql}\n;PRAGMA user_version={number};\nCOMMIT;")
