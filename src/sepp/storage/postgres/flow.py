"""Flow control inside the PostgreSQL backend's reserve (docs/flow-control.md).

Several nodes reserve from one database at once, so a limit is only as good as the lock
around its count. A reserve of a queue with ``max_in_flight`` or a per-key limit first
takes the queue's transaction-scoped advisory lock (``flow_lock``, folded into the
promotion statement ``promote_due_locking``), in queue-name order, and holds it until it
commits. A second node's reserve of that queue waits on the lock and then counts what the
first committed (READ COMMITTED: each statement sees the latest commits), so two nodes never
both take the last slot. The token bucket of a rate limit (a row of ``flow_buckets``) is
read ``FOR UPDATE`` by the reserve that draws from it and written back by its lease
statement: the row lock serialises the draws of every node without the advisory lock, and
FOR UPDATE reads the latest committed tokens. A deadlock between two groups that lock the
same queues in another order is retried by the committer (SQLSTATE 40P01), never
reported. Unlimited queues take no lock.

Cost (measured: a limit that does not bind stays within 10% of unlimited): a
limited queue's reserve runs the statements of an unlimited one — promote, pick the READY
jobs with their sizes, lease them — with the count, the bucket read and the bucket write
folded into them (``flow_ready``, ``lease_seqs_spend``). A per-key limit walks the groups
(``key_seqs``) only when it could bind: when the queue's RESERVED jobs plus the jobs
wanted exceed ``max_in_flight_per_key``, no group can reach it otherwise.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, NamedTuple

from sepp.domain.params import Bucket, FlowLimits
from sepp.storage import flow_keys
from sepp.storage.errors import StoreError
from sepp.storage.postgres.sql import Q
from sepp.storage.row_types import at


class FlowReadyRow(NamedTuple):
    """A row of ``flow_ready``: the queue's RESERVED bound and its token bucket (the same on
    every row), then one READY candidate (None, None when there is none)."""

    reserved: int
    buckets: int
    tokens: Any                         # float, or None without a bucket row
    updated_at: Any                     # int µs, or None without a bucket row
    seq: int | None
    size: int | None


_SEQ, _SIZE = at(FlowReadyRow, "seq"), at(FlowReadyRow, "size")


def lock_queues(flow: Mapping[str, FlowLimits], queues: Iterable[str]) -> list[str]:
    """The queues of ``queues`` whose reserve needs the flow lock (sorted, each once): those
    with ``max_in_flight`` or a per-key limit. A rate limit alone needs only its bucket row."""
    return sorted({q for q in queues if (f := flow.get(q)) is not None and (f.max_in_flight or f.per_key)})


async def promote_locking(conn: Any, now: int, limit: int, queues: Sequence[str]) -> list[Any]:
    """``promote_due`` (due SCHEDULED jobs → READY, at most ``limit``, due at ``now`` µs) that
    also takes the flow lock of each of ``queues`` for the rest of the transaction on the
    asyncpg connection ``conn``; one (queue, run_at, id, job type, attempt) row per job promoted."""
    return [r for r in await conn.fetch(Q["promote_due_locking"], now, limit, list(queues)) if r["queue"] is not None]


async def ready(conn: Any, queue: str, limits: FlowLimits, want: int,
                now: int) -> tuple[int, Bucket | None, list[tuple[int, int]], int]:
    """What a reserve of ``queue`` at ``now`` (µs) may lease, in one statement
    (``flow_ready``): (allowed, bucket, candidates, reserved). ``allowed`` is ``want`` cut to
    the free slots under ``max_in_flight`` and to the whole tokens of the bucket (0 = the
    limits hold every job back); ``bucket`` the token bucket as refilled and locked until the
    transaction ends (None without a rate limit; spend it with ``lease``); ``candidates`` the
    next READY jobs as (seq, bytes), at most ``allowed``, in reserve order, locked;
    ``reserved`` an upper bound on the queue's RESERVED jobs (0 unless ``max_in_flight`` or a
    per-key limit is set): exact whenever it could make a limit bind (the bound of
    ``flow_counts``, migration 0007, is used only while it plus ``want`` stays within the
    smallest limit, and for at most 1 s after its last exact count). The caller holds the
    queue's flow lock when ``lock_queues`` names it.

    Raises ``StoreError`` if the bucket row vanishes between its creation and its read."""
    count, rate = bool(limits.max_in_flight or limits.per_key), limits.rate_amount > 0
    args = (queue, want, limits.max_in_flight, count, rate, now, _threshold(limits), limits.per_key)
    rows = await conn.fetch(Q["flow_ready"], *args)
    head = FlowReadyRow._make(rows[0])
    if rate and head.buckets == 0:  # first draw from this bucket on any node: create it full
        await conn.execute(Q["bucket_ensure"], queue, float(limits.rate_burst), now)
        rows = await conn.fetch(Q["flow_ready"], *args)
        head = FlowReadyRow._make(rows[0])
        if head.buckets == 0:
            raise StoreError(f"the token bucket of queue {queue!r} vanished while reserving")
    reserved = int(head.reserved)
    allowed = want
    if limits.max_in_flight:
        allowed = min(allowed, limits.max_in_flight - reserved)
    bucket = None
    if rate:
        bucket = limits.bucket((head.tokens, head.updated_at), now)
        allowed = min(allowed, bucket.whole)
    allowed = max(0, allowed)
    candidates = [(int(r[_SEQ]), int(r[_SIZE])) for r in rows if r[_SEQ] is not None][:allowed]
    return allowed, bucket, candidates, reserved


async def forget(conn: Any, queue: str) -> None:
    """Drop the bound of ``queue`` (its ``flow_counts`` row) inside the caller's transaction
    on ``conn``, under the queue's flow lock (held until that transaction ends): called
    whenever the queue's settings are written (``QueueOp``) and when the queue is deleted.

    Why (docs/decisions.md "A bound instead of a count"): the bound counts only the leases
    of limited Reserves. While a queue is unlimited (or has only a rate limit) its leases
    go around it, so a checkpoint taken before the limit was lifted and still under 1 s old
    when it is set again would let the first Reserves lease past the limit on the very node
    that set it. Forgetting the bound at the settings change makes the next limited Reserve
    count exactly. The lock first, the delete in a statement of its own: a Reserve that
    read the old bound commits (its row update with it) before the delete runs, and a
    Reserve after it waits for this transaction, so neither brings the old bound back."""
    await conn.execute(Q["flow_forget_lock"], queue)
    await conn.execute(Q["flow_forget"], queue)


def _threshold(limits: FlowLimits) -> int:
    """The smallest limit a count of RESERVED jobs is compared with (``flow_ready`` $7):
    ``max_in_flight`` and, with a per-key limit, ``max_in_flight_per_key`` (0 when neither)."""
    return min((n for n in (limits.max_in_flight, limits.max_per_key if limits.per_key else 0) if n > 0), default=0)


def may_bind_per_key(limits: FlowLimits, reserved: int, allowed: int) -> bool:
    """True when the per-key limit could hold back one of ``allowed`` more jobs of a queue
    with ``reserved`` RESERVED jobs: only then must the reserve walk the groups."""
    return limits.per_key and reserved + allowed > limits.max_per_key


async def lease(conn: Any, queue: str, bucket: Bucket | None, seqs: list[int], lease_id: bytes, expires: int,
                worker: str, now: int, node: str) -> list[Any]:
    """Lease the READY jobs ``seqs`` of ``queue`` (``lease_seqs``; lease id, expiry µs,
    worker, now µs, node) and, with a ``bucket``, store it less one token per job leased in
    the same statement (``lease_seqs_spend``). The leased rows, in no order."""
    if bucket is None:
        return list(await conn.fetch(Q["lease_seqs"], seqs, lease_id, expires, worker, now, node))
    return list(await conn.fetch(Q["lease_seqs_spend"], seqs, lease_id, expires, worker, now, node, queue,
                                 bucket.tokens, bucket.at))


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
