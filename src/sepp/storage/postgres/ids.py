"""Job ids that carry their seq (PostgreSQL schema version 10; docs/decisions.md
"PostgreSQL: job ids carry their seq").

A node takes seqs from the ``jobs`` table's sequence in blocks of ``BLOCK`` (``JobIds.take``) and makes
each new job's id a UUIDv7 whose last 8 bytes are the seq with the variant bits (``10``)
on top: 48 bits of Unix milliseconds, version 7, 12 bits of the sub-millisecond fraction,
then ``1 << 63 | seq``. Such an id finds its row through ``jobs_pkey`` (the seq it carries,
``job_seq_hint`` in SQL), so ``jobs`` keeps no index on ``id`` — one index entry fewer on
every insert and every state change. Any other id ("foreign": rows stored before version
10, ids a store caller chose, rows an older node inserts) is indexed in
``jobs_id_foreign``, and every lookup by id probes that index first.

Order: a node hands out its seqs in increasing order, so its jobs keep their enqueue order
(the FIFO tie-break after priority and ``run_at``). Two nodes' blocks interleave: jobs
enqueued through different nodes in the same microsecond are ordered by whichever block is
lower, and listings in enqueue order (seq) may show one node's jobs up to ``MAX_AGE``
seconds out of time order with another's (seqs older than that are dropped). A row with a
foreign id gets a seq of this node's blocks too, so the seqs a node uses stay dense.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Awaitable, Callable, Sequence

from uuid_utils import UUID

from sepp.domain.clock import SYSTEM_CLOCK, Clock

#: The seq an id carries: its low 62 bits (above them the variant bits ``10``).
SEQ_MASK = (1 << 62) - 1
#: The variant bits of a UUID (RFC 9562: ``10``) over the seq, as the last 8 bytes hold them.
VARIANT = 1 << 63
#: The jobs sequence's increment (migration 0010): each ``nextval`` is a block of this many
#: consecutive seqs, ``[value, value + BLOCK)``, that only its taker uses — so two nodes
#: never interleave within a block. A row stored with the sequence's default (a foreign id,
#: an older node's insert) uses up a whole block.
BLOCK = 1024
#: Blocks fetched at once at first; each take that has to wait for seqs while this node is
#: busy (its seqs are not stale) doubles it, up to ``MAX_BLOCKS`` (a node enqueueing 50,000 jobs/s fetches about
#: three times a second then).
FIRST_BLOCKS = 1
MAX_BLOCKS = 16
#: Seconds a block's seqs are handed out for at most; older ones are dropped so an idle
#: node's next jobs are not ordered before the jobs other nodes enqueued meanwhile by more
#: than this. Not less: each drop leaves a gap in the seqs (up to a block), and a search
#: walks the table in seq ranges (``sepp.storage.search``), so gaps make its pages thinner.
MAX_AGE = 60.0
#: Blocks remembered as this node's (``seq_of``): an id of an older block is stored as
#: foreign, which is correct, only slower to look up.
KEPT_BLOCKS = 4096


def make_id(seq: int, now_ns: int) -> int:
    """The 128-bit id of a job with ``seq`` made at ``now_ns`` (ns since the Unix epoch, UTC):
    UUIDv7 with the seq in its last 62 bits (module docstring)."""
    ms, sub = divmod(now_ns, 1_000_000)
    return (ms << 80) | (0x7000 | (sub * 4096 // 1_000_000)) << 64 | VARIANT | seq


def carried_seq(raw: bytes) -> int:
    """The seq a 16-byte id carries if it is a native id (its last 62 bits); for any other id,
    the value lookups probe ``jobs_pkey`` at (SQL ``job_seq_hint``)."""
    return int.from_bytes(raw[8:16], "big") & SEQ_MASK


class JobIds:
    """This node's blocks of seqs, and the ids made of them.

    ``fetch(k)`` takes ``k`` values of the jobs sequence (``nextval``, one statement: ``k``
    blocks) and raises the store's errors (``StoreUnavailable`` while PostgreSQL is down).
    ``clock``: the store's clock (``sepp.domain.clock``): its ``monotonic`` seconds age the
    blocks, its ``now`` (µs UTC) is the ids' time. Used on the event loop only."""

    def __init__(self, fetch: Callable[[int], Awaitable[Sequence[int]]], clock: Clock = SYSTEM_CLOCK) -> None:
        self._fetch = fetch
        self._clock = clock.monotonic
        self._wall = clock.now
        self._free: deque[int] = deque()
        self._fetched_at = 0.0
        self._blocks = FIRST_BLOCKS
        self._filling: asyncio.Future[None] | None = None
        #: The starts of this node's last KEPT_BLOCKS blocks (a dict: ordered, O(1) lookup).
        self._starts: dict[int, None] = {}
        self._anchor: int | None = None
        #: The highest seq handed out so far (seqs are handed out in increasing order).
        self._handed = -1

    async def take(self, n: int) -> list[UUID]:
        """``n`` new job ids, their seqs increasing in order (``take_seqs``)."""
        seqs = await self.take_seqs(n)
        now_ns = self._wall() * 1000
        return [UUID(int=make_id(seq, now_ns)) for seq in seqs]

    async def take_seqs(self, n: int) -> list[int]:
        """``n`` seqs of this node's blocks, increasing (for ``take``, and for rows with
        foreign ids: every row a node inserts gets a seq of its blocks, so the table's seqs
        stay dense — a search walks them in ranges). Waits for blocks when this node has
        fewer than ``n`` seqs left (or only stale ones); fetches the next blocks in the
        background once half of them are used. Raises what ``fetch`` raises."""
        if n <= 0:
            return []
        free = self._free
        while True:
            stale = self._clock() - self._fetched_at > MAX_AGE
            if not stale and len(free) >= n:
                break
            if stale:
                free.clear()
            else:  # busy: it needs more than the blocks fetched so far left
                self._blocks = min(MAX_BLOCKS, self._blocks * 2)
            await asyncio.shield(self._fill(max(-(-(n - len(free)) // BLOCK), self._blocks)))
        seqs = [free.popleft() for _ in range(n)]
        self._handed = seqs[-1]
        if len(free) < self._blocks * BLOCK // 2:
            self._fill(self._blocks)
        return seqs

    def seq_of(self, raw: bytes) -> int | None:
        """The seq ``raw`` carries when it is an id this node made (a seq of one of its last
        ``KEPT_BLOCKS`` blocks, already handed out); ``None`` for any other id (stored as
        foreign). An id a caller chose that carries a seq this node has not handed out yet
        is foreign: stored with that seq, it would take it from the job the node makes of it
        later (a primary-key violation for an unrelated enqueue)."""
        if len(raw) != 16 or raw[8] & 0xC0 != 0x80 or self._anchor is None:
            return None
        seq = int.from_bytes(raw[8:16], "big") & SEQ_MASK
        if seq > self._handed:
            return None
        return seq if seq - (seq - self._anchor) % BLOCK in self._starts else None

    def _fill(self, k: int) -> asyncio.Future[None]:
        """The fetch of ``k`` more blocks under way, started now if none is: a task of its
        own, so a caller that is cancelled while waiting for it does not cancel it for the
        others. A failed background fetch is left to the next ``take`` that needs seqs (it
        waits for a fetch of its own and raises)."""
        if self._filling is None or self._filling.done():
            self._filling = asyncio.ensure_future(self._fetch_blocks(k))
            self._filling.add_done_callback(_retrieved)
        return self._filling

    async def _fetch_blocks(self, k: int) -> None:
        starts = sorted(await self._fetch(k))
        if self._anchor is None and starts:
            self._anchor = starts[0]
        kept = self._starts
        for start in starts:
            self._free.extend(range(start, start + BLOCK))
            kept[start] = None
        while len(kept) > KEPT_BLOCKS:
            del kept[next(iter(kept))]
        self._fetched_at = self._clock()


def _retrieved(task: asyncio.Future[None]) -> None:
    """Mark a finished fetch's exception retrieved (its waiters re-raise it)."""
    if not task.cancelled():
        task.exception()
