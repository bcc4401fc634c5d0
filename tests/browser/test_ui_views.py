"""The views a new user missed, in Chromium: Busy (the job each worker runs now), Retries
(SCHEDULED retries apart from first runs), per-row selection on /dead acting on exactly the
ticked rows, the local-time toggle, the queue page opening on a state that has jobs, an error
search that says how far it looked and goes on to a match beyond its first stretch, and /jobs."""

from __future__ import annotations

import datetime as dt
import re
import zoneinfo
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from google.protobuf import duration_pb2, timestamp_pb2
from playwright.sync_api import Browser, Page, expect
from support.admin import connect
from support.browser import UI_CONFIG, browser_fixture, dead_letter, enqueue, page_fixture  # noqa: F401
from support.servers import backend_config

from sepp.api.v1 import admin_pb2 as apb
from sepp.api.v1 import common_pb2 as pb
from sepp.api.v1 import worker_pb2 as wpb
from sepp.testing import ServerProcess

pytestmark = [pytest.mark.browser,
              pytest.mark.sqlite_only(reason="backend-neutral (the pages and their JavaScript); the listings they "
                                      "use run on both backends in tests/storage and tests/integration")]

#: A search page examines this many jobs here, so a match "further on" needs few jobs.
SCAN_ROWS = 10


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory, backend: str) -> Iterator[ServerProcess]:
    """One server for the module (a small search bound); each test uses its own queues."""
    config = {**UI_CONFIG, **backend_config(backend), "search_scan_rows": SCAN_ROWS}
    with ServerProcess(Path(tmp_path_factory.mktemp("ui-views")), config) as proc:
        yield proc


def _state(srv: ServerProcess, job_id: str) -> str:
    """The job's state name from the admin API, or "gone"."""
    with connect(srv.grpc_target) as stubs:
        try:
            job = stubs.call("GetJob", apb.GetJobRequest(job_id=job_id))
        except grpc.RpcError as exc:
            assert exc.code() == grpc.StatusCode.NOT_FOUND
            return "gone"
    return str(pb.JobState.Name(job.state))


def test_busy_shows_the_jobs_each_worker_runs_now(page: Page, srv: ServerProcess) -> None:
    queue = "ui-busy"
    with connect(srv.grpc_target) as stubs:
        ids = [stubs.enqueue(queue, "render") for _ in range(3)]
        first = stubs.reserve(queue, 2, worker_id="busy-w1")
        second = stubs.reserve(queue, 1, worker_id="busy-w2")
    assert len(first) == 2 and len(second) == 1
    page.goto(srv.http_url + "/")
    page.get_by_role("link", name="Busy", exact=True).click()
    expect(page).to_have_url(re.compile(r"/busy$"))
    w1 = page.locator("tbody[data-worker='busy-w1']")
    expect(w1.locator("tr:not(.group)")).to_have_count(2)
    for r in first:
        expect(w1).to_contain_text(r.job.id)
    expect(w1.locator("[data-running]")).to_have_text("2")
    expect(w1.locator("tr.group")).to_contain_text("live")
    w2 = page.locator("tbody[data-worker='busy-w2']")
    expect(w2.locator("tr:not(.group)")).to_have_count(1)
    expect(w2).to_contain_text(second[0].job.id)
    expect(w2.locator("a[href='/queues/ui-busy']")).to_be_visible()
    assert set(ids) == {r.job.id for r in first + second}

    # One worker alone, then the polled table drops the job it finishes.
    w1.locator("tr.group a").click()
    expect(page).to_have_url(re.compile(r"/busy\?worker=busy-w1$"))
    expect(page.locator("tbody[data-worker]")).to_have_count(1)
    with connect(srv.grpc_target) as stubs:
        stubs.worker.Ack(wpb.AckRequest(job_id=first[0].job.id, lease_id=first[0].lease_id, worker_id="busy-w1"))
    rows = page.locator("tbody[data-worker='busy-w1'] tr:not(.group)")
    expect(rows).to_have_count(1, timeout=20_000)  # htmx polls every 5 s
    expect(rows).to_contain_text(first[1].job.id)


def test_retries_lists_failed_attempts_waiting_apart_from_first_runs(page: Page, srv: ServerProcess) -> None:
    queue = "ui-retries"
    later = timestamp_pb2.Timestamp()
    later.FromDatetime(dt.datetime.now(dt.UTC) + dt.timedelta(hours=1))
    with connect(srv.grpc_target) as stubs:
        first_run = stubs.enqueue(queue, "report", scheduled_at=later)
        retried = stubs.enqueue(queue, "report")
        other = stubs.enqueue(queue, "report")
        held = stubs.reserve(queue, 2)
        assert {r.job.id for r in held} == {retried, other}
        for r in held:
            stubs.worker.Nack(wpb.NackRequest(job_id=r.job.id, lease_id=r.lease_id,
                                              retry_after=duration_pb2.Duration(seconds=3600),
                                              error=wpb.JobError(message=f"upstream 503 for {r.job.id[:8]}")))
    page.goto(srv.http_url + "/")
    page.get_by_role("link", name="Retries", exact=True).click()
    page.fill("#r-queue", queue)
    page.click("form.filters button[type=submit]")
    rows = page.locator("table.jobs tbody tr")
    expect(rows).to_have_count(2)
    table = page.locator("table.jobs")
    expect(table).to_contain_text(retried)
    expect(table).to_contain_text(f"upstream 503 for {retried[:8]}")
    expect(table).not_to_contain_text(first_run)
    expect(rows.first.locator(".badge", has_text="retry")).to_be_visible()
    # The queue's SCHEDULED tab still holds all three, the retries marked.
    page.goto(f"{srv.http_url}/queues/{queue}?state=scheduled")
    expect(page.locator("table.jobs tbody tr")).to_have_count(3)
    expect(page.locator("table.jobs tbody tr", has_text=first_run).locator(".badge", has_text="retry")) \
        .to_have_count(0)

    # Act on the ticked row only.
    page.goto(f"{srv.http_url}/retries?queue={queue}")
    page.check(f"input[name=job_id][value='{retried}']")
    expect(page.locator("[data-selected-count]")).to_have_text("1 selected:")
    page.click("button:has-text('Cancel selected')")
    expect(page.locator(".flash-ok")).to_contain_text("Cancelled 1 of 1 selected job(s)")
    expect(page).to_have_url(re.compile(r"/retries\?queue=ui-retries$"))
    expect(rows).to_have_count(1)
    expect(rows.first).to_contain_text(other)
    assert _state(srv, retried) == "CANCELLED" and _state(srv, other) == "SCHEDULED"
    assert _state(srv, first_run) == "SCHEDULED"


def test_dead_letters_act_on_exactly_the_ticked_rows(page: Page, srv: ServerProcess) -> None:
    queue = "ui-dead-pick"
    ids = [dead_letter(srv.grpc_target, queue, "mail", error=f"bounce {i}") for i in range(4)]
    page.goto(f"{srv.http_url}/dead?queue={queue}")
    expect(page.locator("table.jobs tbody tr")).to_have_count(4)
    page.check(f"input[name=job_id][value='{ids[0]}']")
    page.check(f"input[name=job_id][value='{ids[2]}']")
    expect(page.locator("[data-selected-count]")).to_have_text("2 selected:")
    page.click("button:has-text('Requeue selected')")
    expect(page.locator(".flash-ok")).to_contain_text("Requeued 2 of 2 selected job(s)")
    expect(page).to_have_url(re.compile(r"/dead\?queue=ui-dead-pick$"))  # back on the filtered list
    expect(page.locator("#matched")).to_contain_text("2 dead-lettered job(s) match")
    assert [_state(srv, j) for j in ids] == ["READY", "DEAD_LETTERED", "READY", "DEAD_LETTERED"]

    page.check(f"input[name=job_id][value='{ids[3]}']")
    page.click("button:has-text('Delete selected')")  # the confirm dialog is accepted
    expect(page.locator(".flash-ok")).to_contain_text("Deleted 1 of 1 selected job(s)")
    expect(page.locator("table.jobs tbody tr")).to_have_count(1)
    expect(page.locator("table.jobs")).to_contain_text(ids[1])
    assert [_state(srv, j) for j in ids] == ["READY", "DEAD_LETTERED", "READY", "gone"]


def test_the_times_toggle_shows_local_time_and_is_remembered(browser: Browser, srv: ServerProcess) -> None:
    job_id = enqueue(srv.grpc_target, "ui-times")
    context = browser.new_context(timezone_id="Asia/Tokyo", viewport={"width": 1280, "height": 900})
    context.set_default_timeout(10_000)
    try:
        page = context.new_page()
        page.goto(f"{srv.http_url}/jobs/{job_id}")
        enqueued = page.locator("table.kv tr", has_text="enqueued_at").locator("time")
        utc_text = enqueued.inner_text()
        assert utc_text.endswith(" UTC")  # the default
        iso = enqueued.get_attribute("datetime")
        assert iso
        tokyo = dt.datetime.fromisoformat(iso).astimezone(zoneinfo.ZoneInfo("Asia/Tokyo"))
        local_text = tokyo.strftime("%Y-%m-%d %H:%M:%S") + " UTC+09:00"
        toggle = page.locator("#times-toggle")
        expect(toggle).to_have_text("Times: UTC")
        toggle.click()
        expect(toggle).to_have_text("Times: local")
        expect(enqueued).to_have_text(local_text)
        expect(enqueued).to_have_attribute("title", utc_text)
        # Remembered across pages and reloads.
        page.goto(f"{srv.http_url}/queues/ui-times")
        expect(page.locator("table.jobs time").first).to_have_text(re.compile(r" UTC\+09:00$"))
        page.goto(f"{srv.http_url}/jobs/{job_id}")
        expect(enqueued).to_have_text(local_text)
        page.locator("#times-toggle").click()
        expect(enqueued).to_have_text(utc_text)
        page.reload()
        expect(enqueued).to_have_text(utc_text)
    finally:
        context.close()


def test_a_queue_page_opens_on_the_first_state_with_jobs(page: Page, srv: ServerProcess) -> None:
    queue = "ui-default-tab"
    dead = dead_letter(srv.grpc_target, queue)
    page.goto(f"{srv.http_url}/queues/{queue}")
    expect(page.locator("#jobs-h")).to_have_text("Jobs: DEAD_LETTERED")
    expect(page.locator("nav.tabs a[aria-current=true]")).to_have_class(re.compile(r"state-dead_lettered"))
    expect(page.locator("table.jobs")).to_contain_text(dead)
    ready = enqueue(srv.grpc_target, queue)
    page.goto(f"{srv.http_url}/queues/{queue}")
    expect(page.locator("#jobs-h")).to_have_text("Jobs: READY")
    expect(page.locator("table.jobs")).to_contain_text(ready)
    page.goto(f"{srv.http_url}/queues/{queue}?state=dead_lettered")  # asked for: kept
    expect(page.locator("#jobs-h")).to_have_text("Jobs: DEAD_LETTERED")


def test_an_error_search_says_how_far_it_looked_and_goes_on_to_a_match(page: Page, srv: ServerProcess) -> None:
    queue = "ui-far"
    target = dead_letter(srv.grpc_target, queue, error="needle: card expired")
    for i in range(2 * SCAN_ROWS + 5):
        dead_letter(srv.grpc_target, queue, error=f"hay {i}")
    total = 2 * SCAN_ROWS + 6
    page.goto(srv.http_url + "/")
    page.fill("#find-q", f"error:needle state:dead_lettered queue:{queue}")
    page.press("#find-q", "Enter")
    # Newest first: the match is the oldest job, beyond the first two stretches of 10.
    progress = page.locator("#search-progress")
    expect(progress).to_have_text(f"No match yet: examined {SCAN_ROWS} of ~{total} job(s) so far")
    expect(page.locator("table.jobs")).to_have_count(0)
    expect(page.locator("#search-empty")).to_have_count(0)  # never "no jobs match" while it has not looked
    further = page.locator("#search-next")
    expect(further).to_contain_text("Search further")
    further.click()
    expect(progress).to_have_text(f"No match yet: examined {2 * SCAN_ROWS} of ~{total} job(s) so far")
    page.locator("#search-next").click()
    rows = page.locator("table.jobs tbody tr")
    expect(rows).to_have_count(1)
    expect(rows.first).to_contain_text(target)
    expect(rows.first).to_contain_text("needle: card expired")
    expect(page.locator("#search-summary")).to_contain_text("searched to the end")
    expect(page.locator("#search-next")).to_have_count(0)


def test_jobs_lists_every_queue_by_state_and_acts_on_ticked_rows(page: Page, srv: ServerProcess) -> None:
    a = enqueue(srv.grpc_target, "ui-jobs-a", "sync")
    b = enqueue(srv.grpc_target, "ui-jobs-b", "sync")
    dead = dead_letter(srv.grpc_target, "ui-jobs-c")
    page.goto(srv.http_url + "/")
    page.get_by_role("link", name="Jobs", exact=True).click()
    expect(page).to_have_url(re.compile(r"/jobs$"))
    expect(page.locator("h1")).to_have_text("Jobs, all queues")
    page.locator("nav.tabs a.state-ready").click()
    expect(page.locator("#jobs-h")).to_contain_text("READY")
    table = page.locator("table.jobs")
    expect(table).to_contain_text(a)
    expect(table).to_contain_text(b)
    expect(table.locator("a[href='/queues/ui-jobs-b']")).to_be_visible()

    page.fill("#j-queue", "ui-jobs-a")
    page.click("form.filters button[type=submit]")
    expect(page.locator("table.jobs tbody tr")).to_have_count(1)
    expect(page.locator("table.jobs")).to_contain_text(a)
    expect(page.locator("nav.tabs a.state-ready .n")).to_have_text("1")
    page.check(f"input[name=job_id][value='{a}']")
    page.click("button:has-text('Cancel selected')")
    expect(page.locator(".flash-ok")).to_contain_text("Cancelled 1 of 1 selected job(s)")
    expect(page.locator("#jobs-empty")).to_be_visible()
    assert _state(srv, a) == "CANCELLED" and _state(srv, b) == "READY"

    # Without ?state= a queue's jobs open on the first state that has some.
    page.goto(f"{srv.http_url}/jobs?queue=ui-jobs-c")
    expect(page.locator("#jobs-h")).to_contain_text("DEAD_LETTERED")
    expect(page.locator("table.jobs")).to_contain_text(dead)
