"""The named queries of the PostgreSQL backend (``queries.sql``, ``admin.sql``), by name."""

from __future__ import annotations

from sepp.storage._sql import load_queries

#: The named queries of ``queries.sql``.
Q = load_queries("sepp.storage.postgres")
#: The named queries of ``admin.sql`` (the admin listings, counts and writes).
A = load_queries("sepp.storage.postgres", "admin.sql")
for _statement in ("search_match", "search_range"):
    A[_statement] = A[_statement].replace("{filters}", A["search_filters"])


def rowcount(status: str) -> int:
    """The row count of a command status ("DELETE 3", "UPDATE 0", "INSERT 0 5"); 0 when it
    ends with no number."""
    tail = status.rsplit(" ", 1)[-1]
    return int(tail) if tail.isdigit() else 0
