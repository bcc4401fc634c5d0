"""Flow control inside the SQLite backend's reserve (issue 12; docs/flow-control.md).

Runs on the writer connection inside ``ops.reserve_op``'s transaction: the single writer
serialises every reserve, so a count taken here cannot be overtaken by another reserve
before the lease lands. Only queues with a limit reach this module (``ReserveParams.flow``);
an unlimited queue keeps the plain reserve statements.
"""

from __future__ import annotations

import sqlite3

from sepp.domain.params import Bucket, FlowLimits
from sepp.storage.sqlite.sql import Q


def room(conn: sqlite3.Connection, queue: str, limits: FlowLimits, want: int, now: int) -> tuple[int, Bucket | None]:
    """How many of ``want`` jobs ``queue`` may lease at ``now`` (µs), and its token bucket
    as refilled (None without a rate limit; ``spend`` it after leasing): ``want`` cut to the
    free slots under ``max_in_flight`` (RESERVED jobs counted through ``jobs_reserved``) and
    to the whole tokens in the bucket. 0 means the limits hold every job back."""
    if limits.max_in_flight:
        reserved = int(conn.execute(Q["count_reserved_in"], (queue,)).fetchone()[0])
        want = min(want, limits.max_in_flight - reserved)
    bucket = None
    if limits.rate_amount and want > 0:
        found = conn.execute(Q["bucket_get"], (queue,)).fetchone()
        bucket = limits.bucket(found, now)
        want = min(want, bucket.whole)
    return max(0, want), bucket


def spend(conn: sqlite3.Connection, queue: str, bucket: Bucket, taken: int) -> None:
    """Store ``bucket`` less the ``taken`` tokens of the jobs just leased."""
    conn.execute(Q["bucket_put"], (queue, bucket.tokens - taken, bucket.at))
