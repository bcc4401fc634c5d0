"""Conformance: ``Store.job_outcomes`` — what a wait for jobs reads of each id: every stored
job among the ids (an unknown id left out), its state and queue, and for a finished job its
history, reason, finish time and result (none yet: the result columns come with the job's
result); an unfinished job's history is not read. Up to 1,000 ids in one read. A store that
is not shared tells no one (``others_waiting`` False)."""

from __future__ import annotations

import os

from sepp.domain.outcomes import JobOutcome
from sepp.domain.params import SettleKind
from sepp.domain.states import State
from sepp.storage.base import Store
from storage.conformance_kit import NOW, S, lease, put, row, settle1

COMPLETED, DEAD, READY, RESERVED = (int(State.COMPLETED), int(State.DEAD_LETTERED), int(State.READY),
                                    int(State.RESERVED))


async def test_outcomes_of_finished_and_unfinished_jobs_and_unknown_ids(store: Store) -> None:
    done, failed, running, waiting = row(max_attempts=1), row(max_attempts=1), row(), row()
    await put(store, done, failed, running, waiting)
    first, second, third = await lease(store, n=3)
    assert [first.id, second.id, third.id] == [done.id, failed.id, running.id]
    await settle1(store, first, SettleKind.ACK, NOW + 2 * S)
    await settle1(store, second, SettleKind.RETRY, NOW + 3 * S, outcome="retry", error_message="boom",
                  error_detail="Traceback …")
    unknown = os.urandom(16)
    got = {o.id: o for o in await store.job_outcomes([done.id, failed.id, running.id, waiting.id, unknown])}
    assert set(got) == {done.id, failed.id, running.id, waiting.id}
    assert all(isinstance(o, JobOutcome) for o in got.values())

    ok = got[done.id]
    assert (ok.state, ok.queue, ok.job_type, ok.attempt, ok.finished_at, ok.finished) == (
        COMPLETED, "q", "t", 1, NOW + 2 * S, True)
    assert (ok.result, ok.result_encoding) == (None, None)
    assert [(e["attempt"], e["outcome"], e["started_at"], e["ended_at"]) for e in ok.attempt_entries()] == [
        (1, "completed", NOW, NOW + 2 * S)]

    dead = got[failed.id]
    assert (dead.state, dead.finished_at, dead.finished) == (DEAD, NOW + 3 * S, True)
    assert dead.reason is not None and dead.reason.startswith("ATTEMPTS_EXHAUSTED")
    assert dead.last_error() == "boom"
    assert [e["error_detail"] for e in dead.attempt_entries()] == ["Traceback …"]

    assert (got[running.id].state, got[running.id].finished, got[running.id].history) == (RESERVED, False, None)
    assert (got[waiting.id].state, got[waiting.id].attempt, got[waiting.id].finished_at) == (READY, 0, None)


async def test_an_unfinished_jobs_history_is_not_read(store: Store) -> None:
    r = row()
    await put(store, r)
    (rec,) = await lease(store)
    await settle1(store, rec, SettleKind.RETRY, NOW + S, delay=0, outcome="retry", error_message="once")
    (o,) = await store.job_outcomes([r.id])
    assert (o.state, o.attempt, o.history, o.finished) == (READY, 1, None, False)


async def test_1000_ids_are_read_at_once_and_an_empty_list_reads_nothing(store: Store) -> None:
    rows = [row() for _ in range(1000)]
    for i in range(0, 1000, 250):
        await put(store, *rows[i:i + 250])
    got = await store.job_outcomes([r.id for r in rows] + [rows[0].id])  # an id twice: one row
    assert sorted(o.id for o in got) == sorted(r.id for r in rows)
    assert await store.job_outcomes([]) == []


async def test_a_store_nobody_shares_tells_nobody(store: Store) -> None:
    if store.shared:
        return  # the shared store's telling: test_finished_notices_nodes
    assert store.others_waiting is False
    store.waiting()
    store.finished([os.urandom(16)], ["q"])  # nothing to tell, nothing raised
