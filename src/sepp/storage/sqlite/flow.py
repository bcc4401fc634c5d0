"""Flow control inside the SQLite backend's reserve (issue 12; docs/flow-control.md).

Runs on the writer connection inside ``ops.reserve_op``'s transaction: the single writer
serialises every reserve, so a count taken here cannot be overtaken by another reserve
before the lease lands. Only queues with a limit reach this module (``ReserveParams.flow``);
an unlimited queue keeps the plain reserve statements.
"""

from __future__ import annotations

import sqlite3

from sepp.domain.params import FlowLimits
from sepp.storage.sqlite.sql import Q


def room(conn: sqlite3.Connection, queue: str, limits: FlowLimits, want: int) -> int:
    """How many of ``want`` jobs ``queue`` may lease now: ``want`` cut to the free slots
    under ``max_in_flight`` (its RESERVED jobs counted through ``jobs_reserved``). 0 means
    the limits hold every job back."""
    if limits.max_in_flight:
        reserved = int(conn.execute(Q["count_reserved_in"], (queue,)).fetchone()[0])
        want = min(want, limits.max_in_flight - reserved)
    return max(0, want)
