"""Named-query files and numbered migrations for the SQL backends (STYLE habit 5).

A ``queries.sql`` holds blocks headed ``-- name: some_name``; ``load_queries`` returns
them as a dict. Migrations are ``migrations/NNNN_*.sql`` applied in order.
"""

from __future__ import annotations

import re
from importlib import resources

_HEADER = re.compile(r"^-- name: (\w+)\s*$", re.MULTILINE)


def load_queries(package: str, filename: str = "queries.sql") -> dict[str, str]:
    """Parse ``filename`` in ``package`` into {name: sql}. Raises ``ValueError`` on duplicates."""
    text = resources.files(package).joinpath(filename).read_text("utf-8")
    parts = _HEADER.split(text)
    out: dict[str, str] = {}
    for name, body in zip(parts[1::2], parts[2::2], strict=True):
        if name in out:
            raise ValueError(f"duplicate query name {name!r} in {package}/{filename}")
        out[name] = body.strip().rstrip(";")
    return out


def migrations(package: str) -> list[tuple[int, str, str]]:
    """Every ``migrations/NNNN_name.sql`` of ``package`` as (number, name, sql), sorted."""
    root = resources.files(package).joinpath("migrations")
    found = []
    for entry in root.iterdir():
        match = re.fullmatch(r"(\d{4})_(\w+)\.sql", entry.name)
        if match:
            found.append((int(match[1]), match[2], entry.read_text("utf-8")))
    return sorted(found)
