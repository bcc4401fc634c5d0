"""The SQLite driver writes exactly what ``sepp.domain.transitions`` decides:
for every settle kind, a lease expiry, an admin cancel and a redrive, the stored row is the
rule's ``Decision`` applied to the row as it was. Real SQLite files in ``tmp_path``; the
backoff jitter is 0 so the rule's ``rand`` does not matter."""

from __future__ import annotations

import asyncio
import json
import sqlite3
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from sepp.domain.params import ReserveParams, SettleKind, SettleParams
from sepp.domain.policy import PolicyTable, QueuePolicy
from sepp.domain.records import JobRow
from sepp.domain.states import State
from sepp.domain.transitions import CancelAction, Decision, ExpiredLease, HeldJob, cancel, reclaim, redrive, settle
from sepp.storage.sqlite import SQLiteStore
from sepp.storage.sqlite.store import DB_FILE

S = 1_000_000
NOW = 1_790_000_000_000_000
POLICY = PolicyTable(QueuePolicy(backoff_base=S, backoff_cap=8 * S, jitter=0.0, completed_retention=60 * S,
                                 dead_retention=600 * S))
_COLUMNS = "state, run_at, attempt, finished_at, purge_at, reason, history, cancel_requested"


def _rows(n: int, max_attempts: int = 2) -> list[JobRow]:
    return [JobRow(bytes([i + 1]) * 16, "q", "t", int(State.READY), 0, NOW - i, NOW, max_attempts, b"p", "", None,
                   None) for i in range(n)]


def _run(tmp_path: Path, body: Callable[[SQLiteStore, sqlite3.Connection], Awaitable[None]]) -> None:
    async def main() -> None:
        store = SQLiteStore(tmp_path)
        await store.open()
        db = sqlite3.connect(f"file:{tmp_path / DB_FILE}?mode=ro", uri=True)
        try:
            await body(store, db)
        finally:
            db.close()
            await store.close()

    asyncio.run(main())


def _row(db: sqlite3.Connection, job_id: bytes) -> dict[str, Any]:
    cur = db.execute(f"SELECT {_COLUMNS} FROM jobs WHERE id = ?", (job_id,))
    return dict(zip([c[0] for c in cur.description], cur.fetchone(), strict=True))


def _held(db: sqlite3.Connection, job_id: bytes) -> HeldJob:
    return HeldJob._make(db.execute(
        "SELECT queue, state, lease_id, lease_expires_at, attempt, max_attempts, worker_id, started_at, "
        "cancel_requested, run_at, node, job_type FROM jobs WHERE id = ?", (job_id,)).fetchone())


def _applied(before: dict[str, Any], d: Decision) -> dict[str, Any]:
    """The row ``before`` with decision ``d`` written (None run_at/entry: kept)."""
    history = before["history"]
    if d.entry is not None:
        history = json.dumps([*json.loads(history or "[]"), json.loads(d.entry)], separators=(",", ":"))
    return {**before, "state": d.state, "run_at": before["run_at"] if d.run_at is None else d.run_at,
            "attempt": d.attempt, "finished_at": d.finished_at, "purge_at": d.purge_at, "reason": d.reason,
            "history": history}


@pytest.mark.parametrize(("kind", "delay", "attempts", "cancel_first"), [
    (SettleKind.ACK, -1, 2, False),
    (SettleKind.RETRY, -1, 2, False),           # backoff: SCHEDULED
    (SettleKind.RETRY, 0, 2, False),            # explicit 0: READY now
    (SettleKind.RETRY, -1, 1, False),           # last attempt: ATTEMPTS_EXHAUSTED
    (SettleKind.DEAD_LETTER, -1, 2, False),
    (SettleKind.RELEASE, -1, 2, False),
    (SettleKind.RETRY, -1, 2, True),            # cancel requested while reserved
    (SettleKind.RELEASE, -1, 2, True),
])
def test_a_settle_writes_the_rules_decision(tmp_path: Path, kind: SettleKind, delay: int, attempts: int,
                                            cancel_first: bool) -> None:
    async def body(store: SQLiteStore, db: sqlite3.Connection) -> None:
        (row,) = _rows(1, attempts)
        await store.enqueue([row], [0], NOW)
        (rec,) = await store.reserve(ReserveParams(["q"], 1, NOW, {"q": 30 * S}, "w1"))
        if cancel_first:
            assert (await store.admin.cancel(row.id, NOW, POLICY, "")).state == int(State.RESERVED)
        p = SettleParams(row.id, rec.lease_id or b"", kind, NOW + S, delay, "NACK_DEAD_LETTER", "", "boom", "trace")
        before, held = _row(db, row.id), _held(db, row.id)
        decision = settle(held, p, POLICY, 0.0)
        assert isinstance(decision, Decision)
        (result,) = await store.settle([p], POLICY)
        assert result == decision.result("q", NOW, "t")  # leased at NOW
        assert _row(db, row.id) == _applied(before, decision)

    _run(tmp_path, body)


def test_batched_acks_write_the_ack_rule(tmp_path: Path) -> None:
    async def body(store: SQLiteStore, db: sqlite3.Connection) -> None:
        rows = _rows(3)
        await store.enqueue(rows, [0] * 3, NOW)
        recs = await store.reserve(ReserveParams(["q"], 3, NOW, {"q": 30 * S}, "w1"))
        items = [SettleParams(r.id, r.lease_id or b"", SettleKind.ACK, NOW + S) for r in recs]
        expected = {}
        for p in items:
            decision = settle(_held(db, p.job_id), p, POLICY, 0.0)
            assert isinstance(decision, Decision)
            before = _row(db, p.job_id)
            # the batched statement leaves the reason column alone (NULL on a reserved job)
            expected[p.job_id] = (decision.result("q", NOW, "t"), _applied(before, decision))
        results = await store.settle(items, POLICY)
        for p, result in zip(items, results, strict=True):
            assert (result, _row(db, p.job_id)) == expected[p.job_id]

    _run(tmp_path, body)


@pytest.mark.parametrize(("attempts", "cancel_first"), [(2, False), (1, False), (2, True)])
def test_a_reclaim_writes_the_rules_decision(tmp_path: Path, attempts: int, cancel_first: bool) -> None:
    async def body(store: SQLiteStore, db: sqlite3.Connection) -> None:
        (row,) = _rows(1, attempts)
        await store.enqueue([row], [0], NOW)
        await store.reserve(ReserveParams(["q"], 1, NOW, {"q": S}, "w1"))
        if cancel_first:
            await store.admin.cancel(row.id, NOW, POLICY, "")
        now = NOW + 5 * S
        before = _row(db, row.id)
        expired = ExpiredLease._make(db.execute(
            "SELECT queue, attempt, max_attempts, worker_id, started_at, lease_expires_at, cancel_requested, node "
            "FROM jobs WHERE id = ?", (row.id,)).fetchone())
        decision = reclaim(expired, now, POLICY)
        result = await store.reclaim_expired(now, 10, POLICY)
        assert result.count == 1
        assert _row(db, row.id) == _applied(before, decision)

    _run(tmp_path, body)


def test_an_admin_cancel_and_a_redrive_write_the_rules_columns(tmp_path: Path) -> None:
    async def body(store: SQLiteStore, db: sqlite3.Connection) -> None:
        (row,) = _rows(1)
        await store.enqueue([row], [0], NOW)
        decision = cancel(int(State.READY), NOW + S, POLICY(""), "")
        assert decision.action is CancelAction.CANCEL
        await store.admin.cancel(row.id, NOW + S, POLICY, "")
        got = _row(db, row.id)
        assert (got["state"], got["finished_at"], got["purge_at"], got["reason"]) == (
            int(State.CANCELLED), decision.finished_at, decision.purge_at, decision.reason)
        back = redrive(got["state"], NOW + 2 * S)
        assert back is not None
        await store.admin.requeue(row.id, NOW + 2 * S)
        got = _row(db, row.id)
        assert (got["state"], got["run_at"], got["attempt"], got["finished_at"], got["purge_at"], got["reason"],
                got["cancel_requested"]) == (back.state, back.run_at, back.attempt, None, None, None, 0)

    _run(tmp_path, body)
