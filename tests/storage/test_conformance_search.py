"""Conformance: job search (``sepp.storage.search``) — the custom-map index
written with the enqueue and gone with the job, exact id and idempotency-key lookups, the
error-text match, the job-type filter, AND of everything, keyset pages in enqueue order and
the scan bound.
"""

from __future__ import annotations

from collections.abc import Sequence

from sepp.domain.params import SettleKind
from sepp.domain.states import State
from sepp.storage.admin import JobQuery
from sepp.storage.base import JobRow, Store
from sepp.storage.search import CustomEntry, search_page
from storage.conformance_kit import NOW, POLICY, S, lease, row, settle1

READY, DEAD, COMPLETED = State.READY, State.DEAD_LETTERED, State.COMPLETED


def _with(r: JobRow, **custom: str) -> tuple[JobRow, list[CustomEntry]]:
    """``r`` with extras (as the engine writes a custom map into them) and its index entries."""
    return r._replace(extras=b"\x22\x00"), [(r.id, k, v) for k, v in custom.items()]


async def _put(store: Store, *jobs: tuple[JobRow, list[CustomEntry]] | JobRow,
               until: Sequence[int] | None = None) -> dict[int, tuple[bytes, int]]:
    rows, entries = [], []
    for job in jobs:
        r, e = (job, []) if isinstance(job, JobRow) else job
        rows.append(r)
        entries += e
    deadlines = list(until) if until is not None else [NOW + 3600 * S] * len(rows)
    return await store.enqueue(rows, deadlines, NOW, (), entries)


async def _ids(store: Store, query: JobQuery, limit: int = 100) -> list[bytes]:
    """Every job of a search, paged by ``limit``; each page but the last is full."""
    out: list[bytes] = []
    after = None
    for _ in range(100):
        page = await store.admin.list_jobs(query, after, limit)
        out += [s.record.id for s in page.jobs]
        if page.next_key is None:
            return out
        assert len(page.jobs) == limit and not page.scan_limited
        after = page.next_key
    raise AssertionError("search does not end")


async def test_a_custom_entry_finds_its_jobs_in_enqueue_order_and_terms_are_anded(store: Store) -> None:
    a = _with(row("q1"), user_id="42", tenant="acme")
    b = _with(row("q2"), user_id="42", tenant="other")
    c = _with(row("q1"), user_id="7", tenant="acme")
    plain = row("q1")
    await _put(store, a, plain, b)
    await _put(store, c)
    assert await _ids(store, JobQuery(custom=(("user_id", "42"),))) == [a[0].id, b[0].id]
    for limit in (1, 2):
        assert await _ids(store, JobQuery(custom=(("user_id", "42"),)), limit) == [a[0].id, b[0].id]
    assert await _ids(store, JobQuery(custom=(("tenant", "acme"), ("user_id", "42")))) == [a[0].id]
    assert await _ids(store, JobQuery(custom=(("user_id", "42"), ("tenant", "nobody")))) == []
    assert await _ids(store, JobQuery(custom=(("user_id", "42"),), queue="q2")) == [b[0].id]
    assert await _ids(store, JobQuery(custom=(("tenant", "acme"),), job_type="other")) == []
    assert await _ids(store, JobQuery(custom=(("user_id", "4"),))) == []  # exact, not a prefix
    assert await _ids(store, JobQuery(custom=(("missing", "42"),))) == []


async def test_the_state_filter_holds_with_a_custom_search(store: Store) -> None:
    first, second = _with(row(), user_id="1"), _with(row(), user_id="1")
    await _put(store, first, second)
    (rec,) = await lease(store, "q")
    await settle1(store, rec, SettleKind.DEAD_LETTER, NOW + S, error_message="boom")
    assert await _ids(store, JobQuery(custom=(("user_id", "1"),), state=int(DEAD))) == [first[0].id]
    assert await _ids(store, JobQuery(custom=(("user_id", "1"),), state=int(READY))) == [second[0].id]


async def test_a_deduplicated_job_writes_no_entries(store: Store) -> None:
    original = _with(row(key="k"), user_id="1")
    await _put(store, original)
    again = _with(row(key="k"), user_id="2")
    assert await _put(store, again) == {0: (original[0].id, int(READY))}
    assert await _ids(store, JobQuery(custom=(("user_id", "2"),))) == []
    assert await _ids(store, JobQuery(custom=(("user_id", "1"),))) == [original[0].id]


async def test_entries_go_with_their_job_however_it_goes(store: Store) -> None:
    deleted, purged = _with(row("a"), user_id="1"), _with(row("b"), user_id="1")
    kept, pruned = _with(row("c"), user_id="1"), _with(row("d"), user_id="1")
    await _put(store, deleted, purged, kept, pruned)
    (rec,) = await lease(store, "d")
    await settle1(store, rec, SettleKind.ACK, NOW + S)
    await store.admin.delete_job(deleted[0].id)
    assert await store.admin.purge("b", [int(READY)], 10) == 1
    swept = await store.prune(NOW + 400 * 24 * 3600 * S, 100)
    assert swept.count == 1
    assert await _ids(store, JobQuery(custom=(("user_id", "1"),))) == [kept[0].id]
    # The newest job deleted, then a job without entries stored: a reused row number (SQLite
    # rowids) must not inherit the entries of the job that had it.
    newest = _with(row("e"), user_id="9")
    await _put(store, newest)
    await store.admin.delete_job(newest[0].id)
    await _put(store, row("e"))
    assert await _ids(store, JobQuery(custom=(("user_id", "9"),))) == []


async def test_an_id_search_is_exact_and_keeps_the_other_filters(store: Store) -> None:
    target, other = row("q1", job_type="mail"), row("q1")
    await _put(store, target, other)
    assert await _ids(store, JobQuery(job_id=target.id)) == [target.id]
    assert await _ids(store, JobQuery(job_id=target.id, queue="q1", job_type="mail")) == [target.id]
    assert await _ids(store, JobQuery(job_id=target.id, queue="q2")) == []
    assert await _ids(store, JobQuery(job_id=target.id, state=int(DEAD))) == []
    assert await _ids(store, JobQuery(job_id=b"\x00" * 16)) == []


async def test_an_idempotency_key_finds_the_job_of_its_claim_in_one_queue_or_every_queue(store: Store) -> None:
    in_a, in_b, unkeyed = row("a", key="order-1"), row("b", key="order-1"), row("a")
    await _put(store, in_a, in_b, unkeyed, row("a", key="order-2"))
    assert await _ids(store, JobQuery(idempotency_key="order-1")) == [in_a.id, in_b.id]
    assert await _ids(store, JobQuery(idempotency_key="order-1"), 1) == [in_a.id, in_b.id]
    assert await _ids(store, JobQuery(idempotency_key="order-1", queue="b")) == [in_b.id]
    assert await _ids(store, JobQuery(idempotency_key="order-1", queue="c")) == []
    assert await _ids(store, JobQuery(idempotency_key="order")) == []


async def test_error_text_matches_the_last_error_message_ignoring_ascii_case(store: Store) -> None:
    jobs = [row(max_attempts=5) for _ in range(4)]
    await _put(store, *jobs)
    messages = ['upstream said "Connection Refused"', "timeout after 30 s", "Zürich: DNS failure", ""]
    for rec, message in zip(await lease(store, n=4), messages, strict=True):
        await settle1(store, rec, SettleKind.DEAD_LETTER, NOW + S, error_message=message)
    retried = row(max_attempts=5)
    await _put(store, retried)
    (rec,) = await lease(store)
    await settle1(store, rec, SettleKind.RETRY, NOW + S, error_message="connection refused", delay=0)
    (rec,) = await lease(store, now=NOW + 2 * S)
    await settle1(store, rec, SettleKind.ACK, NOW + 3 * S)  # completed: its last error is none

    async def found(text: str, **filters: object) -> list[bytes]:
        return await _ids(store, JobQuery(error_contains=text, **filters))  # type: ignore[arg-type]

    assert await found("connection refused") == [jobs[0].id]
    assert await found('said "connection') == [jobs[0].id]
    assert await found("TIMEOUT AFTER") == [jobs[1].id]
    assert await found("zürich") == [jobs[2].id]
    assert await found("ZÜRICH") == []  # only A-Z fold
    assert await found("worker") == []  # the history's other fields are not searched
    assert await found("timeout", state=int(READY)) == []
    assert await found("refused", queue="other") == []


async def test_the_last_attempt_is_the_one_searched(store: Store) -> None:
    job = row(max_attempts=5)
    await _put(store, job)
    (rec,) = await lease(store)
    await settle1(store, rec, SettleKind.RETRY, NOW + S, error_message="first failure", delay=0)
    (rec,) = await lease(store, now=NOW + 2 * S)
    await settle1(store, rec, SettleKind.DEAD_LETTER, NOW + 3 * S, error_message="second failure")
    assert await _ids(store, JobQuery(error_contains="second")) == [job.id]
    assert await _ids(store, JobQuery(error_contains="first")) == []


async def test_a_job_type_search_pages_within_the_states_listing(store: Store) -> None:
    jobs = [row(job_type="mail" if i % 3 == 0 else "sms", run_at=NOW + i) for i in range(9)]
    await _put(store, *jobs)
    mail = [j.id for j in jobs if j.job_type == "mail"]
    assert await _ids(store, JobQuery(job_type="mail"), 1) == mail
    assert await _ids(store, JobQuery(job_type="mail", state=int(READY)), 2) == mail
    assert await _ids(store, JobQuery(job_type="none")) == []


async def test_a_page_stops_at_its_scan_bound_and_the_next_one_goes_on(store: Store) -> None:
    jobs = [row(job_type="rare" if i in (1, 7) else "common") for i in range(9)]
    await _put(store, *jobs)
    query = JobQuery(job_type="rare")
    first = await search_page(store.admin, query, None, 10, budget=4)  # type: ignore[arg-type]
    assert [s.record.id for s in first.jobs] == [jobs[1].id] and first.scan_limited
    assert first.next_key is not None
    second = await search_page(store.admin, query, first.next_key, 10, budget=4)  # type: ignore[arg-type]
    assert [s.record.id for s in second.jobs] == [jobs[7].id] and second.scan_limited
    third = await search_page(store.admin, query, second.next_key, 10, budget=4)  # type: ignore[arg-type]
    assert third.jobs == [] and third.next_key is None and not third.scan_limited
    # A full page before the bound: not limited.
    full = await search_page(store.admin, JobQuery(job_type="common"), None, 2, budget=4)  # type: ignore[arg-type]
    assert len(full.jobs) == 2 and full.next_key is not None and not full.scan_limited


async def test_a_completed_retried_job_is_listed_by_its_entry_with_policy_defaults(store: Store) -> None:
    job = _with(row(), order="A-1")
    await _put(store, job)
    (rec,) = await lease(store)
    await settle1(store, rec, SettleKind.ACK, NOW + S, policy=POLICY)
    (summary,) = (await store.admin.list_jobs(JobQuery(custom=(("order", "A-1"),)), None, 10)).jobs
    assert summary.record.state == int(COMPLETED) and summary.last_error == ""


async def test_an_error_search_inside_a_finished_state_is_its_listing_filtered(store: Store) -> None:
    """DEAD_LETTERED and CANCELLED (SQLite: the walk of jobs_failed, migration 0009): the
    matches are the state's listing in its order (queue by queue, newest first) whose last
    error holds the text; a redriven job is searched by its newest error, a job that left the
    state is not found in it, the other filters hold and pages of one go on."""
    cancelled = State.CANCELLED
    jobs = [row(queue, job_type="mail" if i % 2 else "sms", max_attempts=9)
            for i, queue in enumerate(["a", "b", "a", "c", "b", "a", "c", "a"])]
    await _put(store, *jobs)
    now = NOW
    errors = ["TLS certificate expired", "connection refused", "tls CERTIFICATE expired here", "",
              "certificate expired", "connection refused", "the certificate expired", "disk full"]
    for job, message in zip(jobs, errors, strict=True):
        (rec,) = await lease(store, job.queue, now=now)
        now += S
        if job is jobs[5]:  # retried, then cancelled while READY: its last error stays
            await settle1(store, rec, SettleKind.RETRY, now, error_message="certificate expired", delay=0)
            assert (await store.admin.cancel(job.id, now + 1, POLICY, "")).state == int(cancelled)
        else:
            await settle1(store, rec, SettleKind.DEAD_LETTER, now, error_message=message)
    # Redriven, then dead-lettered again with another error: its newest error is searched.
    await store.admin.requeue(jobs[7].id, now + S)
    (rec,) = await lease(store, "a", now=now + 2 * S)
    await settle1(store, rec, SettleKind.DEAD_LETTER, now + 3 * S, error_message="Certificate Expired again")
    # Redriven and left READY: no longer in DEAD_LETTERED.
    await store.admin.requeue(jobs[6].id, now + 4 * S)

    async def listing(state: State) -> list[bytes]:
        return await _ids(store, JobQuery(state=int(state)))

    async def found(text: str, state: State, limit: int = 100, **filters: object) -> list[bytes]:
        return await _ids(store, JobQuery(error_contains=text, state=int(state), **filters),  # type: ignore[arg-type]
                          limit)

    messages = {job.id: m for job, m in zip(jobs, errors, strict=True)}
    messages[jobs[7].id] = "Certificate Expired again"
    messages[jobs[5].id] = "certificate expired"
    expected = [i for i in await listing(DEAD) if "certificate expired" in messages[i].lower()]
    assert {*expected} == {jobs[0].id, jobs[2].id, jobs[4].id, jobs[7].id}
    assert await found("certificate EXPIRED", DEAD) == expected
    assert await found("certificate expired", DEAD, 1) == expected
    assert await found("certificate expired", DEAD, queue="a") == [i for i in expected if i in
                                                                    {jobs[0].id, jobs[2].id, jobs[7].id}]
    assert await found("certificate expired", DEAD, job_type="sms") == [i for i in expected
                                                                         if i in {jobs[0].id, jobs[2].id, jobs[4].id}]
    assert await found("expired again", DEAD) == [jobs[7].id]
    assert await found("disk full", DEAD) == []  # its newest error is another
    assert await found("certificate expired", cancelled) == [jobs[5].id]
    assert await found("refused", cancelled) == []
    assert await found("certificate", COMPLETED) == []
    assert await found("certificate", READY) == [jobs[6].id]
    # Scan bounds that cut the walk inside a queue and at its end: the pages go on to the same.
    for budget in (1, 2, 3):
        got, after = [], None
        for _ in range(50):
            page = await search_page(store.admin, JobQuery(error_contains="certificate expired",  # type: ignore[arg-type]
                                                           state=int(DEAD)), after, 10, budget=budget)
            got += [s.record.id for s in page.jobs]
            after = page.next_key
            if after is None:
                break
        assert got == expected, budget
