"""Job-type figures in-process on each backend, driven by a FakeClock:
counts per job type (completed, retried, dead-lettered — by nack, by exhausted attempts and
by an expired lease), run times lease → settle with p50 / p95 within 5 % and the exact max,
the last-hour and 24-hour windows, the counts a node has not flushed yet, two nodes' flushes
added up, and the bound on job types per queue."""

from __future__ import annotations

from engine.engine_kit import Harness, S, request
from sepp.server.admin import AdminEngine, TypeFigures
from sepp.server.admin.type_figures import ALPHA, OTHER, TypeRollup, figures_of, merge_reads
from sepp.storage.base import JobRecord

HOUR = 3600 * S


async def _run(h: Harness, job_type: str, seconds: float, outcome: str = "ack", queue: str = "q") -> None:
    """Enqueue one ``job_type`` job, lease it, let ``seconds`` pass, then settle it."""
    await h.engine.enqueue(request(queue, job_type=job_type))
    (job,) = await h.reserve(queue)
    h.clock.advance(us=int(seconds * S))
    await _settle(h, job, outcome)


async def _settle(h: Harness, job: JobRecord, outcome: str) -> None:
    if outcome == "ack":
        await h.ack(job)
    elif outcome == "retry":
        await h.nack(job, retry_after_s=0)
    else:
        await h.nack(job, dead_letter="NOPE")


def _by_type(figures: list[TypeFigures]) -> dict[str, TypeFigures]:
    return {f.job_type: f for f in figures}


def _close(got: float | None, want: float) -> bool:
    return got is not None and abs(got - want) <= ALPHA * want + 1e-9


async def test_counts_and_run_times_per_job_type_over_the_hour_and_the_day(harness: Harness) -> None:
    h = harness
    admin = AdminEngine(h.parts, h.store.admin, flush_interval=3600)
    await admin.start()
    try:
        for seconds in (0.010, 0.020, 0.030, 0.040, 1.0):   # five mails, one slow
            await _run(h, "mail", seconds)
        await _run(h, "mail", 0.5, "retry")
        (again,) = await h.reserve("q")                      # the retried mail runs again: dead-lettered
        h.clock.advance(us=S // 4)
        await _settle(h, again, "dead")
        await _run(h, "sms", 2.0)
        # Not flushed yet: this node's counts are read from memory.
        before = _by_type(await admin.type_figures("q"))
        await admin.flush()
        figures = await admin.type_figures("q")
        assert [f.job_type for f in figures] == ["mail", "sms"]   # busiest first
        assert _by_type(figures) == before
        mail = _by_type(figures)["mail"]
        assert (mail.hour.completed, mail.hour.retried, mail.hour.dead_lettered, mail.hour.runs) == (5, 1, 1, 7)
        assert mail.hour == mail.day
        # Seven runs: 10, 20, 30, 40 ms, 0.25, 0.5, 1 s. Nearest rank: p50 = 4th = 40 ms; p95 = 7th = 1 s.
        assert _close(mail.hour.p50, 0.040) and _close(mail.hour.p95, 1.0)
        assert mail.hour.max == 1.0
        sms = _by_type(figures)["sms"]
        assert (sms.hour.completed, sms.hour.runs, sms.hour.max) == (1, 1, 2.0) and _close(sms.hour.p50, 2.0)

        h.clock.advance(us=2 * HOUR)                          # out of the hour, still in the day
        await _run(h, "mail", 0.003)
        mail = _by_type(await admin.type_figures("q"))["mail"]
        assert (mail.hour.completed, mail.hour.runs, mail.hour.max) == (1, 1, 0.003)
        assert (mail.day.completed, mail.day.runs, mail.day.max) == (6, 8, 1.0)
        sms = _by_type(await admin.type_figures("q"))["sms"]
        assert (sms.hour.completed, sms.hour.runs, sms.hour.p50, sms.hour.max) == (0, 0, None, None)
        assert sms.day.completed == 1

        await admin.flush()
        h.clock.advance(us=23 * HOUR)                         # the first runs leave the day
        assert _by_type(await admin.type_figures("q"))["mail"].day.completed == 1
        h.clock.advance(us=2 * HOUR)
        await admin.flush()                                   # and the store drops them
        assert await admin.type_figures("q") == []
    finally:
        await admin.stop()


async def test_an_expired_lease_counts_as_retried_or_dead_lettered_without_a_run_time(harness: Harness) -> None:
    h = harness
    admin = AdminEngine(h.parts, h.store.admin, flush_interval=3600)
    await admin.start()
    try:
        await h.engine.enqueue(request(job_type="pdf", max_attempts=1))
        await h.engine.enqueue(request(job_type="pdf", max_attempts=3))
        await h.reserve(n=2, lease_s=1)
        h.clock.advance(us=2 * S)
        await h.sweeper.reclaim_once()
        pdf = _by_type(await admin.type_figures("q"))["pdf"]
        assert (pdf.hour.completed, pdf.hour.retried, pdf.hour.dead_lettered, pdf.hour.runs) == (0, 1, 1, 0)
        assert pdf.hour.p50 is None and pdf.hour.max is None
    finally:
        await admin.stop()


async def test_two_nodes_flushes_add_up_in_the_store(harness: Harness) -> None:
    """Every node adds its counts to the same rows (the cluster's figures on PostgreSQL): a
    second rollup flushing into the same store adds, it does not overwrite."""
    h = harness
    admin = AdminEngine(h.parts, h.store.admin, flush_interval=3600)
    await admin.start()
    other = TypeRollup(h.clock)
    h.parts.events.settled.subscribe(other.on_settled)     # "another node" saw the same settles
    try:
        await _run(h, "mail", 0.1)
        await _run(h, "mail", 0.3)
        await admin.flush()
        await h.store.admin.add_type_figures(*other.take(), 0, 0)
        mail = _by_type(await admin.type_figures("q"))["mail"]
        assert (mail.hour.completed, mail.hour.runs, mail.hour.max) == (4, 4, 0.3)
        assert _close(mail.hour.p50, 0.1) and _close(mail.hour.p95, 0.3)
    finally:
        await admin.stop()


async def test_job_types_beyond_the_bound_count_as_other(harness: Harness) -> None:
    h = harness
    admin = AdminEngine(h.parts, h.store.admin, flush_interval=3600)
    admin.types.max_types = 2
    await admin.start()
    try:
        for job_type in ("a", "b", "c", "d", "a"):
            await _run(h, job_type, 0.01)
        figures = await admin.type_figures("q")
        assert [(f.job_type, f.hour.completed) for f in figures] == [("a", 2), ("b", 1), (OTHER, 2)]
        await admin.flush()
        # A read folds past its own bound too (and merges the folded histograms exactly).
        minute = h.now // (60 * S)
        stored = await h.store.admin.type_figures("q", minute - minute % 60 - 23 * 60, minute - 59)
        folded = figures_of(merge_reads(stored, admin.types.pending_read("q", 0, 0)), max_types=1)
        assert [(f.job_type, f.hour.completed, f.hour.runs) for f in folded] == [("a", 2, 2), (OTHER, 3, 3)]
    finally:
        await admin.stop()
