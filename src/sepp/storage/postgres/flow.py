"""Flow control inside the PostgreSQL backend's reserve (issue 12; docs/flow-control.md).

Several nodes reserve from one database at once, so a limit is only as good as the lock
around its count: every reserve of a limited queue first takes the queue's transaction-scoped
advisory lock (``flow_lock``), in queue-name order, and holds it until it commits. A second
node's reserve of that queue waits on the lock and then counts what the first committed
(READ COMMITTED: each statement sees the latest commits), so two nodes never both take the
last slot, nor the same token of the queue's bucket (a row of ``flow_buckets``). A deadlock
between two groups that lock the same queues in another order is retried by the committer
(SQLSTATE 40P01), never reported. Unlimited queues take no lock.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from sepp.domain.params import Bucket, FlowLimits
from sepp.storage import flow_keys
from sepp.storage.postgres.sql import Q


async def lock(conn: Any, queues: Iterable[str]) -> None:
    """Take the flow lock of each of ``queues`` (sorted, each once) for the rest of the
    transaction on the asyncpg connection ``conn``."""
    for queue in sorted(set(queues)):
        await conn.execute(Q["flow_lock"], queue)


async def room(conn: Any, queue: str, limits: FlowLimits, want: int, now: int) -> tuple[int, Bucket | None]:
    """How many of ``want`` jobs ``queue`` may lease at ``now`` (µs), and its token bucket
    as refilled (None without a rate limit; ``spend`` it after leasing): ``want`` cut to the
    free slots under ``max_in_flight`` (RESERVED jobs counted through ``jobs_reserved``) and
    to the whole tokens in the bucket. 0 means the limits hold every job back. The caller
    holds the queue's flow lock."""
    if limits.max_in_flight:
        reserved = int(await conn.fetchval(Q["count_reserved_in"], queue))
        want = min(want, limits.max_in_flight - reserved)
    bucket = None
    if limits.rate_amount and want > 0:
        found = await conn.fetchrow(Q["bucket_get"], queue)
        bucket = limits.bucket(None if found is None else (found[0], found[1]), now)
        want = min(want, bucket.whole)
    return max(0, want), bucket


async def spend(conn: Any, queue: str, bucket: Bucket, taken: int) -> None:
    """Store ``bucket`` less the ``taken`` tokens of the jobs just leased."""
    await conn.execute(Q["bucket_put"], queue, bucket.tokens - taken, bucket.at)


#: READY rows fetched per page of the per-key scan.
_PAGE = 256


async def key_seqs(conn: Any, queue: str, limits: FlowLimits, want: int, budget: int, used: int,
                   have: bool) -> tuple[list[int], int]:
    """The seqs to lease under the per-key limit and the call's bytes after them: the
    RESERVED jobs of each group counted, then at most ``flow_keys.KEY_SCAN`` READY jobs
    walked in reserve order, a page at a time (``flow_keys.Picker``). The caller holds the
    queue's flow lock."""
    held = flow_keys.reserved_groups((r[0] for r in await conn.fetch(Q["reserved_extras_in"], queue)), limits.key)
    picker = flow_keys.Picker(limits.key, limits.max_per_key, held, want, budget, used, have)
    cursor = await conn.cursor(Q["ready_keys"], queue, flow_keys.KEY_SCAN)
    while True:
        page = await cursor.fetch(_PAGE)
        if picker.feed(page) or len(page) < _PAGE:
            return picker.seqs, picker.used
