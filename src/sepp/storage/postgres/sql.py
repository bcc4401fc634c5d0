"""The named queries of the PostgreSQL backend (``queries.sql``), by name."""

from __future__ import annotations

from sepp.storage._sql import load_queries

#: The named queries of ``queries.sql``.
Q = load_queries("sepp.storage.postgres")


def rowcount(status: str) -> int:
    """The row count of a command status ("DELETE 3", "UPDATE 0", "INSERT 0 5"); 0 when it
    ends with no number."""
    tail = status.rsplit(" ", 1)[-1]
    return int(tail) if tail.isdigit() else 0
