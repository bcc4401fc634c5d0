"""The sweep passes of the SQLite backend, run on the writer: promotion (SCHEDULED → READY),
reclaim of expired leases (``sepp.domain.transitions.reclaim``) and pruning.

A sweep pass isolates failures (docs/decisions.md "Sweeps skip what they cannot
process"): its rows are first handled as a batch inside a savepoint; when that raises, the
savepoint is rolled back and every row is handled in a savepoint of its own, so a row that
cannot be processed is skipped (and reported) and every other row is still handled in the
same pass. The rows come in index order, one page at a time by key, so a pass goes on past
the rows it skipped: they are tried again by the next pass but never hold the others back.

The ``*_op`` functions are module-level so they pickle (the writer may run in its own
process); the connection comes last (``functools.partial`` binds the rest).
"""

from __future__ import annotations

import sqlite3
from collections import namedtuple
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

from sepp.domain.params import SkippedRow, SweepResult, promotion
from sepp.domain.policy import PolicyLookup
from sepp.domain.states import State
from sepp.domain.transitions import reclaim
from sepp.quoting import clip
from sepp.storage.errors import StoreError
from sepp.storage.row_types import ExpiredRow, at
from sepp.storage.rows import fetch_lenient
from sepp.storage.sqlite.sql import Q

#: Rows a pass may skip before it stops (keeps one write transaction short even when a
#: database holds very many unprocessable rows); the next pass starts over from the oldest.
MAX_SKIPPED = 1_000
_INT64_MIN = -(2**63)
_Row = Sequence[Any]
_READY, _DEAD = int(State.READY), int(State.DEAD_LETTERED)


def _error_text(exc: BaseException) -> str:
    """One line saying what went wrong with a row: type and message, at most ~300 bytes."""
    return clip(" ".join(f"{type(exc).__name__}: {exc}".split()), 300)


def _rollback_to(conn: sqlite3.Connection, name: str, exc: BaseException) -> None:
    """Undo a failed savepoint. When SQLite already rolled the whole transaction back (disk
    full, I/O error) the failure is not the row's: ``exc`` is raised and fails the pass."""
    if not conn.in_transaction:
        raise exc
    conn.execute(f"ROLLBACK TO {name}")
    conn.execute(f"RELEASE {name}")


def _each_isolated(conn: sqlite3.Connection, rows: Sequence[_Row], apply: Callable[[sqlite3.Connection, _Row], Any],
                   ) -> tuple[list[tuple[_Row, Any]], list[tuple[_Row, BaseException]]]:
    """``apply(conn, row)`` for every row, in one savepoint; if one raises, everything is rolled
    back and each row is applied in a savepoint of its own. Returns (row, value) of the rows
    applied and (row, exception) of those that failed."""
    conn.execute("SAVEPOINT sweep_batch")
    try:
        done = [(row, apply(conn, row)) for row in rows]
    except Exception as exc:
        _rollback_to(conn, "sweep_batch", exc)
    else:
        conn.execute("RELEASE sweep_batch")
        return done, []
    done = []
    failed: list[tuple[_Row, BaseException]] = []
    for row in rows:
        conn.execute("SAVEPOINT sweep_row")
        try:
            value = apply(conn, row)
        except Exception as exc:
            _rollback_to(conn, "sweep_row", exc)
            failed.append((row, exc))
        else:
            conn.execute("RELEASE sweep_row")
            done.append((row, value))
    return done, failed


def _paged(conn: sqlite3.Connection, sql: str, now: int, limit: int, start: tuple[Any, ...],
           key_of: Callable[[_Row], tuple[Any, ...]], apply: Callable[[sqlite3.Connection, _Row], Any],
           ) -> tuple[list[tuple[_Row, Any]], list[tuple[_Row, BaseException]]]:
    """Apply ``apply`` to up to ``limit`` rows of ``sql`` (parameters: ``now``, the key to
    start after, the page size), isolating failures (``_each_isolated``). After a page with a
    failed row the next page starts after that page's last key, until ``limit`` rows were
    handled, the rows run out, or ``MAX_SKIPPED`` were skipped."""
    done: list[tuple[_Row, Any]] = []
    failed: list[tuple[_Row, BaseException]] = []
    key = start
    while len(done) < limit:
        want = limit - len(done)
        # A text value that is not UTF-8 (a queue name of a damaged row) is read with U+FFFD
        # rather than failing the whole pass; the rows are handled by seq.
        rows = fetch_lenient(conn, sql, (now, *key, want))
        page_done, page_failed = _each_isolated(conn, rows, apply)
        done += page_done
        failed += page_failed
        if not page_failed or len(rows) < want or len(failed) >= MAX_SKIPPED:
            break
        key = key_of(rows[-1])
    return done, failed


def _batch_or_rows(conn: sqlite3.Connection, batch: Callable[[], Any]) -> tuple[bool, Any]:
    """Run ``batch()`` (one statement) in a savepoint: (True, its value), or (False, None)
    after rolling it back when it raised (the caller then goes row by row)."""
    conn.execute("SAVEPOINT sweep_stmt")
    try:
        value = batch()
    except Exception as exc:
        _rollback_to(conn, "sweep_stmt", exc)
        return False, None
    conn.execute("RELEASE sweep_stmt")
    return True, value


def _skipped(failed: Sequence[tuple[_Row, BaseException]], id_at: int, queue_at: int,
             key_at: int | None = None) -> tuple[SkippedRow, ...]:
    return tuple(SkippedRow(row[id_at], row[queue_at], _error_text(exc), None if key_at is None else row[key_at])
                 for row, exc in failed)


# ---------------------------------------------------------------------- promotion

#: The rows of the paged passes (a pass row by row when its one statement failed): a due job
#: (``due_jobs``), a job past retention (``purgeable_jobs``), an expired key (``expired_keys``).
_DueRow = namedtuple("_DueRow", "seq queue run_at id")
_PurgeableRow = namedtuple("_PurgeableRow", "seq queue purge_at id")
_KeyRow = namedtuple("_KeyRow", "queue key expires_at job_id")
_DUE_SEQ, _DUE_QUEUE, _DUE_RUN_AT, _DUE_ID = (at(_DueRow, n) for n in ("seq", "queue", "run_at", "id"))
_PURGE_SEQ, _PURGE_QUEUE, _PURGE_AT, _PURGE_ID = (at(_PurgeableRow, n) for n in ("seq", "queue", "purge_at", "id"))
_KEY_QUEUE, _KEY, _KEY_EXPIRES, _KEY_JOB = (at(_KeyRow, n) for n in ("queue", "key", "expires_at", "job_id"))


def _promote_row(conn: sqlite3.Connection, row: _Row) -> None:
    conn.execute(Q["promote_one"], (row[_DUE_SEQ],))


def promote(conn: sqlite3.Connection, now: int, limit: int) -> SweepResult:
    """Due SCHEDULED jobs (run_at ≤ ``now`` µs) → READY, at most ``limit``: one statement,
    or row by row when it fails (also run by every Reserve before it leases).
    ``promoted_jobs`` names each job (not for the rows done one by one)."""
    ok, rows = _batch_or_rows(conn, lambda: conn.execute(Q["promote_due"], (now, limit)).fetchall())
    if ok:
        return promotion(rows)
    done, failed = _paged(conn, Q["due_jobs"], now, limit, (_INT64_MIN, 0), lambda r: (r[_DUE_RUN_AT], r[_DUE_SEQ]),
                          _promote_row)
    return SweepResult(len(done), frozenset(row[_DUE_QUEUE] for row, _ in done), {},
                       _skipped(failed, _DUE_ID, _DUE_QUEUE),
                       promoted_run_at=tuple(row[_DUE_RUN_AT] for row, _ in done))


def promote_op(now: int, limit: int, conn: sqlite3.Connection) -> SweepResult:
    """Writer side of ``SQLiteStore.promote_due``."""
    return promote(conn, now, limit)


# ---------------------------------------------------------------------- reclaim

#: Positions in an ``expired_leases`` row (``ExpiredRow``): its page key and what a skipped row reports.
_SEQ, _EXPIRES_AT = at(ExpiredRow, "seq"), at(ExpiredRow, "lease_expires_at")
_ID, _QUEUE = at(ExpiredRow, "id"), at(ExpiredRow, "queue")

def _reclaim_row(now: int, policy: PolicyLookup, conn: sqlite3.Connection, row: _Row) -> int:
    """Apply the reclaim rule to one ``expired_leases`` row under its lease guard; the new state."""
    lease = ExpiredRow._make(row)
    seq, lease_id = lease.seq, lease.lease_id
    decision = reclaim(lease.lease(), now, policy)
    if decision.run_at is None:
        cur = conn.execute(Q["reclaim_ready"], (decision.state, decision.entry, seq, lease_id))
    else:
        cur = conn.execute(Q["settle_update"], (*decision[:6], decision.entry, seq, lease_id))
    if cur.rowcount != 1:  # cannot happen with one writer: the row was read in this transaction
        raise StoreError(f"reclaim of job seq {seq} found it no longer leased")
    return decision.state


def reclaim_op(now: int, limit: int, policy: PolicyLookup, conn: sqlite3.Connection) -> SweepResult:
    """Writer side of ``SQLiteStore.reclaim_expired``: each expired lease back to READY, or
    CANCELLED (cancel requested) or DEAD_LETTERED (last attempt) as ``transitions.reclaim``
    decides; failures isolated per row."""
    done, failed = _paged(conn, Q["expired_leases"], now, limit, (_INT64_MIN, 0),
                          lambda r: (r[_EXPIRES_AT], r[_SEQ]), partial(_reclaim_row, now, policy))
    woke = set()
    dead: dict[str, int] = {}
    expired: dict[str, int] = {}
    types: dict[tuple[str, str, int], int] = {}
    changed: list[tuple[bytes, str, str, int, int]] = []
    for found, state in done:
        row = ExpiredRow._make(found)
        queue = row.queue
        expired[queue] = expired.get(queue, 0) + 1
        if state == _READY:
            woke.add(queue)
        elif state == _DEAD:
            dead[queue] = dead.get(queue, 0) + 1
        key = (queue, row.job_type if isinstance(row.job_type, str) else "", state)
        types[key] = types.get(key, 0) + 1
        changed.append((row.id, queue, key[1], state, row.attempt))
    return SweepResult(len(done), frozenset(woke), dead, _skipped(failed, _ID, _QUEUE), expired,
                       expired_types=types, reclaimed_jobs=tuple(changed))


# ---------------------------------------------------------------------- prune

def _prune_job(conn: sqlite3.Connection, row: _Row) -> None:
    conn.execute(Q["prune_one"], (row[_PURGE_SEQ],))


def _prune_key(conn: sqlite3.Connection, row: _Row) -> None:
    conn.execute(Q["prune_key"], (row[_KEY_QUEUE], row[_KEY]))


def prune_op(now: int, limit: int, conn: sqlite3.Connection) -> SweepResult:
    """Writer side of ``SQLiteStore.prune``: one statement for jobs and one for keys, each
    row by row when it fails, and one for expired workflow keys."""
    skipped: tuple[SkippedRow, ...] = ()
    ok, jobs = _batch_or_rows(conn, lambda: conn.execute(Q["prune_jobs"], (now, limit)).rowcount)
    if not ok:
        done, failed = _paged(conn, Q["purgeable_jobs"], now, limit, (_INT64_MIN, 0),
                              lambda r: (r[_PURGE_AT], r[_PURGE_SEQ]), _prune_job)
        jobs, skipped = len(done), _skipped(failed, _PURGE_ID, _PURGE_QUEUE)
    ok, keys = _batch_or_rows(conn, lambda: conn.execute(Q["prune_idempotency"], (now, limit)).rowcount)
    if not ok:
        done, failed = _paged(conn, Q["expired_keys"], now, limit, (_INT64_MIN, "", ""),
                              lambda r: (r[_KEY_EXPIRES], r[_KEY_QUEUE], r[_KEY]), _prune_key)
        keys, skipped = len(done), skipped + _skipped(failed, _KEY_JOB, _KEY_QUEUE, _KEY)
    # A workflow key row holds only a text key, an id and ints: no row by row fallback.
    keys += conn.execute(Q["prune_workflow_keys"], (now, limit)).rowcount
    return SweepResult(int(jobs + keys), skipped=skipped)
