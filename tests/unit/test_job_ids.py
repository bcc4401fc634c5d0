"""``sepp.storage.postgres.ids.JobIds``: blocks of seqs and the ids made of them, with a fetch
that hands out values as PostgreSQL's jobs sequence does after migration 0010 (increment
``BLOCK``; the store's own is exercised by tests/storage/test_conformance_ids.py) and a fake
monotonic clock."""

from __future__ import annotations

import asyncio
import itertools
import uuid

import pytest

from sepp.storage.errors import StoreUnavailable
from sepp.storage.postgres import ids
from sepp.storage.postgres.ids import BLOCK, MAX_AGE, MAX_BLOCKS, JobIds, carried_seq, make_id


class Sequence:
    """``nextval`` of the jobs sequence (start 7, increment ``BLOCK``) that another node also
    draws from (``interleave`` values taken by it between two of ours), counting fetches;
    ``fail`` makes the next fetches raise, ``gate`` holds them."""

    def __init__(self, interleave: int = 0) -> None:
        self.values = itertools.count(7, BLOCK)
        self.interleave = interleave
        self.fetches: list[int] = []
        self.fail = False
        self.gate: asyncio.Event | None = None

    async def fetch(self, k: int) -> list[int]:
        self.fetches.append(k)
        if self.gate is not None:
            await self.gate.wait()
        if self.fail:
            raise StoreUnavailable("PostgreSQL unavailable: down")
        out = []
        for _ in range(k):
            out.append(next(self.values))
            for _ in range(self.interleave):
                next(self.values)
        return out


class Clock:
    """``sepp.domain.clock.Clock`` with a settable monotonic reading (``at``, seconds)."""

    def __init__(self) -> None:
        self.at = 1000.0

    def monotonic(self) -> float:
        return self.at

    def now(self) -> int:
        return 1_790_000_000_000_000


def _raw(seq: int) -> bytes:
    return make_id(seq, 1_790_000_000_000_000_000).to_bytes(16, "big")


def test_an_id_carries_its_seq_as_a_uuidv7() -> None:
    for seq in (0, 1, 12_345, (1 << 62) - 1):
        raw = make_id(seq, 1_790_000_000_123_456_789).to_bytes(16, "big")
        parsed = uuid.UUID(bytes=raw)
        assert parsed.version == 7 and parsed.variant == uuid.RFC_4122
        assert int.from_bytes(raw[:6], "big") == 1_790_000_000_123  # Unix ms
        assert carried_seq(raw) == seq
        assert raw[8:] == (seq | 1 << 63).to_bytes(8, "big")  # SQL int8send(seq | 1 << 63)
    # Sub-millisecond time orders the ids of one millisecond (before the seq).
    early, late = (make_id(9, 1_790_000_000_123_000_000 + ns).to_bytes(16, "big") for ns in (1_000, 900_000))
    assert early < late


async def test_takes_share_a_block_and_hand_out_increasing_seqs() -> None:
    seq = Sequence()
    job_ids = JobIds(seq.fetch, Clock())
    got = [carried_seq(u.bytes) for n in (1, 10, 100) for u in await job_ids.take(n)]
    assert got == list(range(7, 118))
    assert seq.fetches == [1]  # one block serves all three
    assert all(job_ids.seq_of(_raw(s)) == s for s in got)


async def test_a_take_larger_than_the_blocks_waits_for_enough_and_fetches_grow_to_the_cap() -> None:
    seq = Sequence(interleave=1)  # another node takes every other block
    job_ids = JobIds(seq.fetch, Clock())
    made = [u.bytes for u in await job_ids.take(5 * BLOCK + 1)]
    assert seq.fetches == [6]  # the first take: its seqs were stale (none), so just enough
    seqs = [carried_seq(raw) for raw in made]
    assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs)
    # Whole blocks of this node only: [7, 7 + BLOCK), then [7 + 2 BLOCK, ...), ...
    assert all((s - 7) // BLOCK % 2 == 0 for s in seqs)
    for _ in range(40):
        await job_ids.take(BLOCK)
    await asyncio.sleep(0)
    assert max(seq.fetches[1:]) == MAX_BLOCKS
    assert all(job_ids.seq_of(raw) == s for raw, s in zip(made, seqs, strict=True))


async def test_seqs_older_than_max_age_are_dropped() -> None:
    seq, clock = Sequence(), Clock()
    job_ids = JobIds(seq.fetch, clock)
    (first,) = await job_ids.take(1)
    clock.at += MAX_AGE  # exactly MAX_AGE old: still used
    (second,) = await job_ids.take(1)
    assert carried_seq(second.bytes) == carried_seq(first.bytes) + 1
    clock.at += 0.001
    (third,) = await job_ids.take(1)
    assert carried_seq(third.bytes) == 7 + BLOCK  # the rest of the first block is gone
    assert len(seq.fetches) == 2


async def test_concurrent_takes_wait_for_one_fetch_and_get_distinct_ids() -> None:
    seq = Sequence()
    seq.gate = asyncio.Event()
    job_ids = JobIds(seq.fetch, Clock())
    takes = [asyncio.ensure_future(job_ids.take(n)) for n in (3, 300, 30)]
    await asyncio.sleep(0.01)  # the takes run while the fetch is held: a check that only one fetch starts
    assert len(seq.fetches) == 1 and not any(t.done() for t in takes)
    seq.gate.set()
    made = [u.bytes for t in takes for u in await t]
    assert len(set(made)) == 333
    assert all(job_ids.seq_of(raw) is not None for raw in made)


async def test_a_failed_fetch_fails_its_takes_and_the_next_take_fetches_again() -> None:
    seq = Sequence()
    seq.fail = True
    job_ids = JobIds(seq.fetch, Clock())
    with pytest.raises(StoreUnavailable):
        await job_ids.take(1)
    seq.fail = False
    assert len(await job_ids.take(2)) == 2
    assert len(seq.fetches) == 2


async def test_a_cancelled_take_does_not_cancel_the_fetch_the_others_wait_for() -> None:
    seq = Sequence()
    seq.gate = asyncio.Event()
    job_ids = JobIds(seq.fetch, Clock())
    first = asyncio.ensure_future(job_ids.take(1))
    other = asyncio.ensure_future(job_ids.take(1))
    await asyncio.sleep(0.01)
    first.cancel()
    await asyncio.sleep(0.01)
    seq.gate.set()
    (got,) = await asyncio.wait_for(other, 5)
    assert job_ids.seq_of(got.bytes) is not None and len(seq.fetches) == 1


async def test_ids_this_node_did_not_make_are_foreign() -> None:
    seq = Sequence(interleave=1)
    job_ids = JobIds(seq.fetch, Clock())
    assert job_ids.seq_of(_raw(7)) is None  # nothing fetched yet
    made = (await job_ids.take(1))[0].bytes
    assert job_ids.seq_of(made) == 7
    other_nodes = _raw(7 + BLOCK)  # the block the other node took
    wrong_variant = made[:8] + bytes([made[8] & 0x3F]) + made[9:]
    for raw in (other_nodes, _raw(7 + 100 * BLOCK), wrong_variant, made[:15]):
        assert job_ids.seq_of(raw) is None, raw.hex()
    # Only the last KEPT_BLOCKS blocks count: an id of an older block is stored as foreign.
    for _ in range(ids.KEPT_BLOCKS // MAX_BLOCKS + 2):
        await job_ids.take(MAX_BLOCKS * BLOCK)
    assert job_ids.seq_of(made) is None
