"""Job search (issue 13 item 3): the custom-map index's entries and the bounded page walk
both backends run a search with.

A search is a listing (``AdminStore.list_jobs``) whose ``JobQuery`` has one of the search
filters (``JobQuery.searching``). It is answered in two steps, the same on every backend:

1. a **driver** hands over candidate jobs in page order, from an index:

   * ``job_id`` — the one job with that id (``UNIQUE(id)``);
   * ``idempotency_key`` — the job each claim of that key points at (``idempotency``'s
     primary key (queue, key): one probe for the queue given, or one per queue);
   * ``custom`` — the jobs with the first ``key = value`` term (``job_custom_match``
     (key, value, seq), in enqueue order);
   * otherwise the listing's own walk for the state asked (``jobs_ready``,
     ``jobs_finished``, …, or the table in enqueue order);

2. a **match** keeps the candidates that pass every other filter (queue, state, job type,
   reason, finish window, the other custom terms — each a primary-key probe of
   ``job_custom`` — and the error text's cheap prefilter), and for an error search the page
   checks each survivor's last error message exactly.

The walk is bounded: one page examines at most ``SCAN_ROWS`` candidates. When a page stops
at that bound before it is full, it ends early (``JobPage.scan_limited``) with a position
to go on from, so no search costs more than ``SCAN_ROWS`` candidates per page, however rare
its matches are. The indexed drivers (id, key, custom entry) hand over only jobs that have
what is searched, so they reach the bound only when other filters reject most of them.
"""

from __future__ import annotations

import math
import re
from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import Protocol, TypeVar

from sepp.storage.admin import JobPage, JobQuery, JobSummary, SortKey, first_position, position_int

#: Candidates one search page examines at most (see the module docstring; measured in
#: benchmarks/search.py: a page that examines all of them stays under 200 ms on 1,000,000
#: jobs on both backends).
SCAN_ROWS = 20_000
#: Candidates the first round of a page asks for (at least; twice the page otherwise), and
#: the most any round asks for: common matches answer after one small round, rare ones
#: walk the whole budget in few round trips.
FIRST_ROUND, MAX_ROUND = 200, 5_000
#: A custom entry is indexed only when its key and its value's text are at most this many
#: UTF-8 bytes (and hold no NUL, which PostgreSQL text cannot store); a search term longer
#: than this is refused (INVALID_ARGUMENT), since it could never match.
MAX_TERM_BYTES = 256
#: Most ``key = value`` terms of one search (AND).
MAX_CUSTOM_TERMS = 8
#: Longest error text searched for, UTF-8 bytes.
MAX_ERROR_BYTES = 256

#: One index entry to write with an enqueue: (job id, key, value as text).
CustomEntry = tuple[bytes, str, str]

_ASCII_LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")
#: Characters no JSON writer escapes: printable ASCII but the quote and the backslash.
_PLAIN_RUN = re.compile(r'[ !#-\[\]-~]+')


def value_text(value: str | int | float | bool) -> str:
    """A custom value as the index stores it and a search compares it: a string as it is,
    an int in decimal, a bool as ``true`` / ``false``, a float as its shortest round-trip
    decimal (Python ``repr``: ``1.5``, ``42.0``, ``1e+100``). So ``user_id=42`` finds the
    int 42 and the string "42", but not the float 42.0 (whose text is ``42.0``)."""
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, float):
        return repr(value) if math.isfinite(value) else str(value)
    return str(value)


def indexable(key: str, text: str) -> bool:
    """Whether an entry goes into the index (``MAX_TERM_BYTES``, no NUL)."""
    return (len(key) <= MAX_TERM_BYTES // 4 or len(key.encode()) <= MAX_TERM_BYTES) \
        and (len(text) <= MAX_TERM_BYTES // 4 or len(text.encode()) <= MAX_TERM_BYTES) \
        and "\x00" not in key and "\x00" not in text


def ascii_lower(text: str) -> str:
    """``text`` with A-Z lowered and every other character kept: the case folding of the
    error search, the same in SQLite (``lower``), PostgreSQL (``translate``) and Python."""
    return text.translate(_ASCII_LOWER)


def prefilter(needle: str) -> str:
    """The part of an error search a stored history's raw JSON text must contain (lowered):
    the longest run of characters no JSON writer escapes, so the prefilter never drops a
    job whose message holds ``needle``. "" when there is none (then every history passes)."""
    runs = _PLAIN_RUN.findall(ascii_lower(needle))
    return max(runs, key=len) if runs else ""


K = TypeVar("K")
S = TypeVar("S")


async def bounded_page(walk: Callable[[K | None, int], Awaitable[tuple[list[tuple[int, K]], bool]]],
                       match: Callable[[list[int]], Awaitable[list[S]]],
                       seq_of: Callable[[S], int], after: K | None, limit: int,
                       budget: int = SCAN_ROWS) -> tuple[list[S], K | None, bool]:
    """One search page: ``walk(position, n)`` gives up to ``n`` candidates (seq, sort key)
    after ``position`` in page order and whether the walk is over; ``match(seqs)`` the
    matching ones among them as page items (in any order; ``seq_of`` names an item's job).

    Returns (up to ``limit`` items in page order, the position of the next page or None on
    the last, whether the page stopped at ``budget`` candidates before it was full)."""
    out: list[S] = []
    out_key: K | None = None
    position = after
    examined = 0
    size = max(FIRST_ROUND, 2 * (limit + 1))
    while True:
        n = min(size, budget - examined, MAX_ROUND)
        candidates, done = await walk(position, n)
        examined += len(candidates)
        if candidates:
            found = {seq_of(item): item for item in await match([seq for seq, _ in candidates])}
            for seq, key in candidates:
                item = found.get(seq)
                if item is None:
                    continue
                if len(out) == limit:  # one more match: the page is full and another follows
                    return out, out_key, False
                out.append(item)
                out_key = key
            position = candidates[-1][1]
        if done or not candidates:
            return out, None, False
        if examined >= budget:
            return out, position, len(out) < limit
        size *= 4



class SearchBackend(Protocol):
    """What a backend's admin store gives ``search_page``: its drivers, its match and its
    listing walk (every method may raise ``StoreError``; a walk a malformed position)."""

    async def by_custom(self, key: str, value: str, after_seq: int, limit: int) -> list[int]:
        """Up to ``limit`` seqs of jobs with entry key = value, after ``after_seq``, ascending."""

    async def by_id(self, job_id: bytes, after_seq: int) -> list[int]:
        """The seq of the job with id ``job_id`` if it is after ``after_seq``."""

    async def by_key(self, queue: str | None, key: str, after_seq: int, limit: int) -> list[int]:
        """Seqs (ascending, after ``after_seq``, up to ``limit``) of the jobs the claims of
        idempotency key ``key`` point at: in ``queue``, or in every queue (None)."""

    async def match(self, query: JobQuery, seqs: list[int], needle: str | None) -> list[int]:
        """The seqs among ``seqs`` whose jobs pass every filter of ``query`` but the exact
        error check (``needle``: the error prefilter, ``prefilter``; None without one)."""

    async def walk(self, query: JobQuery, after: SortKey | None, n: int) -> list[tuple[int, SortKey]]:
        """The plain listing's next ``n`` (seq, sort key) of ``query`` (no search filter)."""

    async def summaries(self, seqs: list[int]) -> list[JobSummary]:
        """The listed rows of ``seqs`` in that order (gone ones left out)."""


async def search_page(backend: SearchBackend, query: JobQuery, after: SortKey | None, limit: int,
                      budget: int = SCAN_ROWS) -> JobPage:
    """One page of a search (``JobQuery.searching``; the module docstring): the driver of
    ``query``, its matches, and for an error search the exact check of each match's last
    error. Raises ``ValueError`` for a position that does not fit the query's order."""
    if query.indexed:
        seq = position_int(after[0]) if after and len(after) == 1 else first_position(after, 1)[0]
        walk = _indexed_walk(backend, query)

        async def walk_seq(position: SortKey | None, n: int) -> tuple[list[tuple[int, SortKey]], bool]:
            start = seq if position is None else position_int(position[0])
            seqs = await walk(start, n)
            return [(s, [s]) for s in seqs], len(seqs) < n

        walker = walk_seq
    else:
        plain = replace(query, job_type=None, error_contains=None)

        async def walk_plain(position: SortKey | None, n: int) -> tuple[list[tuple[int, SortKey]], bool]:
            keys = await backend.walk(plain, position, n)
            return keys, len(keys) < n

        walker = walk_plain
    error = query.error_contains
    needle = None if error is None else prefilter(error)
    if error is None:
        async def match_seqs(seqs: list[int]) -> list[int]:
            return await backend.match(query, seqs, None)

        found, next_key, limited = await bounded_page(walker, match_seqs, int, after, limit, budget)
        return JobPage(await backend.summaries(found), next_key, limited)
    folded = ascii_lower(error)

    async def match_errors(seqs: list[int]) -> list[JobSummary]:
        hits = await backend.match(query, seqs, needle)
        return [s for s in await backend.summaries(hits) if folded in ascii_lower(s.last_error)]

    items, next_key, limited = await bounded_page(walker, match_errors, lambda s: s.record.seq, after, limit,
                                                  budget)
    return JobPage(items, next_key, limited)


def _indexed_walk(backend: SearchBackend, query: JobQuery) -> Callable[[int, int], Awaitable[list[int]]]:
    """The driver of an indexed search: id first, then key, then the first custom term."""
    job_id, key = query.job_id, query.idempotency_key
    if job_id is not None:
        async def by_id(after_seq: int, _n: int) -> list[int]:
            return await backend.by_id(job_id, after_seq)

        return by_id
    if key is not None:
        async def by_key(after_seq: int, n: int) -> list[int]:
            return await backend.by_key(query.queue, key, after_seq, n)

        return by_key
    first_key, first_value = query.custom[0]

    async def by_custom(after_seq: int, n: int) -> list[int]:
        return await backend.by_custom(first_key, first_value, after_seq, n)

    return by_custom
