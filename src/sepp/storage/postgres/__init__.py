"""The PostgreSQL backend: several ``sepp serve`` nodes on one database.

``PostgresStore`` implements ``sepp.storage.base.Store`` with asyncpg (docs/decisions.md
"PostgreSQL through asyncpg"); ``schema.migrate`` creates and migrates the schema under an
advisory lock (also ``sepp migrate --postgres-dsn``).
"""
from __future__ import annotations

from sepp.storage.postgres.store import PostgresStore

__all__ = ["PostgresStore"]
