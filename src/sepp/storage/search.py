"""Job search: the custom-map index's entries and the bounded page walk
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
from typing import Protocol

from sepp.domain.states import State
from sepp.storage.admin import JobPage, JobQuery, JobSummary, SortKey, first_position, position_int

#: Candidates one search page examines at most (see the module docstring; measured in
#: benchmarks/search.py: a page that examines all of them stays under 200 ms on 1,000,000
#: jobs on both backends).
SCAN_ROWS = 10_000
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
    error search's exact check (the SQL prefilters use ``lower``, which folds at least A-Z:
    SQLite's exactly those, PostgreSQL's every script, which only lets more through)."""
    return text.translate(_ASCII_LOWER)


def prefilter(needle: str) -> str:
    """The part of an error search a stored history's raw JSON text must contain (lowered):
    the longest run of characters no JSON writer escapes, so the prefilter never drops a
    job whose message holds ``needle``. "" when there is none (then every history passes)."""
    runs = _PLAIN_RUN.findall(ascii_lower(needle))
    return max(runs, key=len) if runs else ""


#: One round of a search page: ``step(position, n)`` examines up to ``n`` candidates after
#: ``position`` and returns (the matches among them in page order as (seq, sort key), the
#: position after what it examined, how many it examined, whether the walk is over).
Step = Callable[[SortKey | None, int], Awaitable[tuple[list[tuple[int, SortKey]], SortKey | None, int, bool]]]


async def bounded_page(step: Step, after: SortKey | None, limit: int,
                       budget: int = SCAN_ROWS) -> tuple[list[tuple[int, SortKey]], SortKey | None, bool, int]:
    """One search page from rounds of ``step``: the first ``limit`` matches after ``after``.

    Returns (up to ``limit`` (seq, sort key) in page order, the position of the next page or
    None on the last, whether the page stopped at ``budget`` candidates before it was full,
    how many candidates it examined).
    Rounds grow from ``FIRST_ROUND`` (or twice the page) by ×4 up to ``MAX_ROUND``."""
    out: list[tuple[int, SortKey]] = []
    position = after
    examined = 0
    size = max(FIRST_ROUND, 2 * (limit + 1))
    while True:
        hits, position, seen, done = await step(position, min(size, budget - examined, MAX_ROUND))
        examined += seen
        for hit in hits:
            if len(out) == limit:  # one more match: the page is full and another follows
                return out, out[-1][1], False, examined
            out.append(hit)
        if done:
            return out, None, False, examined
        if examined >= budget:
            return out, position, len(out) < limit, examined
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

    async def match_range(self, query: JobQuery, low: int, high: int, needle: str | None) -> list[int]:
        """As ``match`` for the jobs with low < seq ≤ high, ascending (a range of the table:
        the any-state walk without fetching its candidates)."""

    async def seq_bounds(self) -> tuple[int, int] | None:
        """(smallest, largest) seq stored, or None when there is no job."""

    async def walk(self, query: JobQuery, after: SortKey | None, n: int) -> list[tuple[int, SortKey]]:
        """The plain listing's next ``n`` (seq, sort key) of ``query`` (no search filter)."""

    async def walk_errors(self, query: JobQuery, after: SortKey | None, n: int,
                          folded: str) -> tuple[list[tuple[int, SortKey]], SortKey | None, int] | None:
        """The next ``n`` candidates of ``walk`` (same order, same positions) tested for an
        error search — whether the job's last error message, A-Z lowered, holds ``folded``,
        read from an index, not the rows: (the (seq, sort key) that pass, in walk order; the
        position after the last one examined, ``after`` when none was; how many were
        examined). None when the backend has no such walk for ``query``'s state (then
        ``walk`` + ``match``)."""

    async def summaries(self, seqs: list[int]) -> list[JobSummary]:
        """The listed rows of ``seqs`` in that order (gone ones left out)."""


async def search_page(backend: SearchBackend, query: JobQuery, after: SortKey | None, limit: int,
                      budget: int = SCAN_ROWS) -> JobPage:
    """One page of a search (``JobQuery.searching``; the module docstring): the driver of
    ``query``, its matches, and for an error search the exact check of each match's last
    error. Raises ``ValueError`` for a position that does not fit the query's order."""
    error = query.error_contains
    needle = None if error is None else prefilter(error)
    if query.indexed or query.state is None:
        if after is not None and len(after) != 1:
            raise ValueError("malformed page position")
        _seq_at(after)
        step = _indexed_step(backend, query, needle) if query.indexed else \
            await _range_step(backend, query, needle)
    elif error is not None and query.state == int(State.COMPLETED):
        return JobPage([], None)  # a completed job's last error is none: nothing can match
    else:
        step = _walk_step(backend, query, needle)
    checked: dict[int, JobSummary] = {}
    if error is not None:
        step = _checking(step, backend, ascii_lower(error), checked)
    hits, next_key, limited, examined = await bounded_page(step, after, limit, budget or SCAN_ROWS)
    seqs = [s for s, _ in hits]
    if error is not None:
        jobs = [checked[s] for s in seqs]
    else:
        jobs = await backend.summaries(seqs)
    return JobPage(jobs, next_key, limited, examined)


def _seq_at(position: SortKey | None) -> int:
    """The seq of a ``[seq]`` position (the smallest int64 for the start). Raises
    ``ValueError`` for a malformed one."""
    if position is not None and len(position) != 1:
        raise ValueError("malformed page position")
    return position_int(position[0]) if position else first_position(None, 1)[0]


def _indexed_step(backend: SearchBackend, query: JobQuery, needle: str | None) -> Step:
    """Rounds of an indexed search: the driver (id first, then key, then the first custom
    term) hands over candidates in enqueue order, ``match`` keeps the ones that pass."""
    job_id, key = query.job_id, query.idempotency_key

    async def candidates(after_seq: int, n: int) -> list[int]:
        if job_id is not None:
            return await backend.by_id(job_id, after_seq)
        if key is not None:
            return await backend.by_key(query.queue, key, after_seq, n)
        first_key, first_value = query.custom[0]
        return await backend.by_custom(first_key, first_value, after_seq, n)

    async def step(position: SortKey | None, n: int) -> tuple[list[tuple[int, SortKey]], SortKey | None, int, bool]:
        seqs = await candidates(_seq_at(position), n)
        if not seqs:
            return [], position, 0, True
        found = set(await backend.match(query, seqs, needle))
        hits: list[tuple[int, SortKey]] = [(s, [s]) for s in seqs if s in found]
        return hits, [seqs[-1]], len(seqs), job_id is not None or len(seqs) < n

    return step


async def _range_step(backend: SearchBackend, query: JobQuery, needle: str | None) -> Step:
    """Rounds of a search over every state: ranges of the table in enqueue order (``n``
    seqs a round), matched in one statement each."""
    bounds = await backend.seq_bounds()

    async def step(position: SortKey | None, n: int) -> tuple[list[tuple[int, SortKey]], SortKey | None, int, bool]:
        if bounds is None:
            return [], position, 0, True
        low = max(_seq_at(position), bounds[0] - 1)
        high = min(low + n, bounds[1])
        seqs = await backend.match_range(query, low, high, needle)
        return [(s, [s]) for s in seqs], [high], high - low, high >= bounds[1]

    return step


def _walk_step(backend: SearchBackend, query: JobQuery, needle: str | None) -> Step:
    """Rounds of a search in one state: the state's listing walk hands over candidates in
    its order, ``match`` keeps the ones that pass. An error search walks with
    ``walk_errors`` where the backend has it, and matches only the candidates it flags."""
    plain = replace(query, job_type=None, error_contains=None)
    folded = None if query.error_contains is None else ascii_lower(query.error_contains)

    async def step(position: SortKey | None, n: int) -> tuple[list[tuple[int, SortKey]], SortKey | None, int, bool]:
        tested = None if folded is None else await backend.walk_errors(plain, position, n, folded)
        if tested is not None:
            passed, after, seen = tested
            found = set(await backend.match(query, [s for s, _ in passed], needle)) if passed else set()
            return [h for h in passed if h[0] in found], after, seen, seen < n
        keys = await backend.walk(plain, position, n)
        if not keys:
            return [], position, 0, True
        found = set(await backend.match(query, [s for s, _ in keys], needle))
        return [k for k in keys if k[0] in found], keys[-1][1], len(keys), len(keys) < n

    return step


def _checking(step: Step, backend: SearchBackend, folded: str, checked: dict[int, JobSummary]) -> Step:
    """``step`` with the exact error check: a match whose last error message (A-Z folded)
    does not hold ``folded`` is dropped; the summaries read are kept in ``checked``."""

    async def checking(position: SortKey | None,
                       n: int) -> tuple[list[tuple[int, SortKey]], SortKey | None, int, bool]:
        hits, after, seen, done = await step(position, n)
        if hits:
            for summary in await backend.summaries([s for s, _ in hits]):
                if folded in ascii_lower(summary.last_error):
                    checked[summary.record.seq] = summary
            hits = [h for h in hits if h[0] in checked]
        return hits, after, seen, done

    return checking
