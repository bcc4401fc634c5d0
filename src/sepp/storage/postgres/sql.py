"""The named queries of the PostgreSQL backend (``queries.sql``), by name."""

from __future__ import annotations

from sepp.storage._sql import load_queries

#: The named queries of ``queries.sql``.
Q = load_queries("sepp.storage.postgres")
