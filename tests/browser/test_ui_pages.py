"""The admin web UI in Chromium (SPEC §4): enqueue form, queue/job pages, dead letters, dashboard."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Page, expect
from support.browser import UI_CONFIG, browser_fixture, dead_letter, enqueue, page_fixture  # noqa: F401
from support.servers import backend_config

from sepp.testing import ServerProcess

pytestmark = [pytest.mark.browser,
              pytest.mark.sqlite_only(reason="backend-neutral (the pages' JavaScript); the UI over HTTP runs on "
                                      "PostgreSQL in tests/integration/test_admin_ui_http.py")]


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory, backend: str) -> Iterator[ServerProcess]:
    """One server for the module; each test uses its own queues."""
    with ServerProcess(Path(tmp_path_factory.mktemp("ui-pages")), {**UI_CONFIG, **backend_config(backend)}) as proc:
        yield proc


def test_a_job_enqueued_through_the_form_shows_its_ack_and_appears_on_the_queue_page(
        page: Page, srv: ServerProcess) -> None:
    page.goto(f"{srv.http_url}/enqueue")
    page.fill("#queue", "ui:form.q-1")
    page.fill("#job_type", "send_welcome")
    page.fill("#encoding", "application/json")
    page.fill("#payload", '{"user_id": 42, "name": "Ada"}')
    page.fill("#ck1", "user_id")
    page.select_option("#ct1", "int")
    page.fill("#cv1", "42")
    page.click("#add-custom")
    rows = page.locator("#custom-rows .custom-row")
    expect(rows).to_have_count(2)
    rows.nth(1).locator("[name=custom_key]").fill("vip")
    rows.nth(1).locator("[name=custom_type]").select_option("bool")
    rows.nth(1).locator("[name=custom_value]").fill("true")
    page.select_option("#priority", "7")
    page.fill("#max_attempts", "3")
    page.fill("#idempotency_key", "welcome-42")
    page.click("button[type=submit].primary")
    expect(page.locator("#ack-job-id")).to_be_visible()
    job_id = page.locator("#ack-job-id").inner_text()
    assert re.fullmatch(r"[0-9a-f-]{36}", job_id)
    expect(page.locator("#ack-dedup")).to_have_text("false")
    # The same key again: deduplicated to the same job.
    page.click("button[type=submit].primary")
    expect(page.locator("#ack-dedup")).to_have_text("true")
    assert page.locator("#ack-job-id").inner_text() == job_id

    page.goto(f"{srv.http_url}/queues/ui:form.q-1")
    expect(page.locator("table.jobs")).to_contain_text(job_id)
    page.click(f"a[href='/jobs/{job_id}']")
    expect(page.locator("h1")).to_contain_text(job_id)
    payload = page.locator("pre.payload-json").inner_text()
    assert json.loads(payload) == {"user_id": 42, "name": "Ada"} and "\n" in payload  # pretty-printed
    custom = page.locator("section[aria-labelledby=custom-h] table")
    expect(custom).to_contain_text("user_id")
    expect(custom.locator("tr", has_text="user_id")).to_contain_text("int")
    expect(custom.locator("tr", has_text="vip")).to_contain_text("bool")
    expect(page.locator("table.kv")).to_contain_text("welcome-42")


def test_an_over_limit_payload_is_caught_in_the_browser_and_refused_by_the_server(
        page: Page, srv: ServerProcess) -> None:
    page.goto(f"{srv.http_url}/enqueue")
    page.fill("#queue", "small")
    page.fill("#job_type", "t")
    page.fill("#encoding", "text/plain")
    page.fill("#payload", "x" * 17)
    expect(page.locator("#payload-size")).to_contain_text("17 of 16 bytes")
    page.click("button[type=submit].primary")
    expect(page.locator("#client-code")).to_have_text("PayloadTooLarge")
    expect(page.locator("#client-check")).to_contain_text("limit 16")
    expect(page.locator("#result")).to_have_count(0)  # nothing was sent
    page.check("#skip_checks")
    page.click("button[type=submit].primary")
    expect(page.locator("#rejection-code")).to_have_text("PayloadTooLarge")
    result = page.locator("#result")
    expect(result).to_contain_text("payload.data")
    expect(result.locator("dd").nth(1)).to_have_text("16")
    expect(result.locator("dd").nth(2)).to_have_text("17")
    expect(page.locator("#payload")).to_have_value("x" * 17)  # the form keeps what was typed


def test_the_browser_check_follows_the_catalogue_order(page: Page, srv: ServerProcess) -> None:
    page.goto(f"{srv.http_url}/enqueue")
    page.fill("#queue", ".bad")
    page.fill("#job_type", "t")
    page.click("button[type=submit].primary")
    expect(page.locator("#client-code")).to_have_text("QueueNameInvalid")
    page.fill("#cv1", "1")  # a value without a key is malformed: InvalidArgument wins
    page.click("button[type=submit].primary")
    expect(page.locator("#client-code")).to_have_text("InvalidArgument")


def test_a_dead_lettered_job_is_requeued_from_the_dead_letter_page(page: Page, srv: ServerProcess) -> None:
    first = dead_letter(srv.grpc_target, "ui-dead", error="database timeout")
    second = dead_letter(srv.grpc_target, "ui-dead", error="database timeout")
    page.goto(f"{srv.http_url}/dead?queue=ui-dead")
    expect(page.locator("#matched")).to_contain_text("2 dead-lettered job(s) match")
    expect(page.locator("table.jobs")).to_contain_text("database timeout")
    page.fill("#f-type", "t")
    page.click("form.filters button[type=submit]")
    page.get_by_role("button", name=re.compile(r"Requeue 2 job")).click()
    expect(page.locator(".flash")).to_contain_text("Requeued 2 of 2")
    expect(page.locator("#matched")).to_contain_text("0 dead-lettered")
    page.goto(f"{srv.http_url}/jobs/{first}")
    expect(page.locator(".badge").first).to_have_text("READY")
    expect(page.locator("table.kv")).to_contain_text("0 / 10")
    expect(page.locator("table.attempts")).to_contain_text("database timeout")  # history kept
    assert second


def test_a_single_job_is_requeued_from_its_page(page: Page, srv: ServerProcess) -> None:
    job_id = dead_letter(srv.grpc_target, "ui-dead-one", reason="nope")
    page.goto(f"{srv.http_url}/jobs/{job_id}")
    expect(page.locator("table.kv")).to_contain_text("NACK_DEAD_LETTER: nope")
    page.get_by_role("button", name="Requeue").click()
    expect(page.locator(".flash")).to_contain_text("requeued")
    expect(page.locator(".badge").first).to_have_text("READY")


def test_a_deferred_job_page_names_its_dependency_and_follows_it_live(page: Page, srv: ServerProcess) -> None:
    dep = enqueue(srv.grpc_target, "ui-deps")
    child = enqueue(srv.grpc_target, "ui-deps-child", depends_on=[dep])
    page.goto(f"{srv.http_url}/jobs/{child}")
    expect(page.locator(".badge").first).to_have_text("DEFERRED")
    expect(page.locator("#waiting-on")).to_contain_text(dep)
    # Its dependency cancelled on another tab: the open page turns CANCELLED by itself.
    other = page.context.new_page()
    other.on("dialog", lambda dialog: dialog.accept())
    other.goto(f"{srv.http_url}/jobs/{dep}")
    other.get_by_role("button", name="Cancel").click()
    expect(other.locator(".flash")).to_contain_text("cancelled")
    expect(page.locator(".badge").first).to_have_text("CANCELLED")
    expect(page.locator("#job-live")).to_contain_text(f"DEPENDENCY_FAILED: dependency {dep} was cancelled")
    expect(page.locator("#waiting-on")).to_have_count(0)
    # A requeue of the dependency revives it: it waits again.
    other.get_by_role("button", name="Requeue").click()
    expect(other.locator(".flash")).to_contain_text("requeued")
    page.reload()
    expect(page.locator(".badge").first).to_have_text("DEFERRED")
    page.goto(f"{srv.http_url}/queues/ui-deps-child")
    expect(page.locator("table.jobs")).to_contain_text(child)


def test_queue_page_pauses_resumes_and_purges(page: Page, srv: ServerProcess) -> None:
    for _ in range(3):
        enqueue(srv.grpc_target, "ui-q:ops")
    page.goto(f"{srv.http_url}/queues/ui-q:ops")
    expect(page.locator("#queue-stats")).to_contain_text("3")
    page.get_by_role("button", name="Pause").click()
    expect(page.locator("h1 .badge.paused")).to_be_visible()
    page.get_by_role("button", name="Resume").click()
    expect(page.locator("h1 .badge.paused")).to_have_count(0)
    page.get_by_role("button", name="Purge").click()
    expect(page.locator(".flash")).to_contain_text("Purged 3 job(s)")


def test_the_dashboard_refreshes_itself(page: Page, srv: ServerProcess) -> None:
    enqueue(srv.grpc_target, "ui-live")
    page.goto(srv.http_url + "/")
    ready = page.locator("table.queues tr", has_text="ui-live").locator('a[href$="?state=ready"]')
    expect(ready).to_have_text("1")
    expect(page.locator("figure.chart svg polyline:not(.partial)")).to_have_count(3)
    enqueue(srv.grpc_target, "ui-live")
    expect(ready).to_have_text("2", timeout=20_000)  # htmx polls every 5 s


def test_the_24_hour_chart_is_one_click_away_and_stays_while_polling(page: Page, srv: ServerProcess) -> None:
    enqueue(srv.grpc_target, "ui-history")
    page.goto(srv.http_url + "/queues/ui-history")
    chart = page.locator("figure.chart")
    expect(chart.locator("figcaption")).to_contain_text("per minute over the last hour")
    chart.get_by_role("link", name="24h").click()
    expect(page).to_have_url(re.compile(r"window=24h"))
    expect(chart.locator("figcaption")).to_contain_text("per 20 minutes over the last 24 hours")
    expect(chart.locator(".xaxis span").first).to_have_text("−24 h")
    expect(chart.locator("svg polyline.enq:not(.partial)")).to_have_count(1)
    expect(chart.locator("nav.windows a[aria-current=true]")).to_have_text("24h")
    enqueue(srv.grpc_target, "ui-history")
    expect(page.locator("#queue-stats .state-ready .n")).to_have_text("2", timeout=20_000)  # htmx polled
    expect(chart.locator("figcaption")).to_contain_text("per 20 minutes")  # … and kept the window


def test_the_workers_page_lists_a_worker_and_its_jobs_in_flight(page: Page, srv: ServerProcess) -> None:
    from support.admin import connect

    with connect(srv.grpc_target) as stubs:
        stubs.enqueue("ui-workers")
        stubs.enqueue("ui-workers")
        assert len(stubs.reserve("ui-workers", 2, worker_id="ui-worker-1")) == 2
    page.goto(srv.http_url + "/")
    page.get_by_role("link", name="Workers", exact=True).click()
    expect(page).to_have_url(re.compile(r"/workers$"))
    row = page.locator("table.workers tr[data-worker='ui-worker-1']")
    expect(row).to_contain_text("live")
    expect(row.locator("td").nth(4)).to_have_text("2")  # in flight
    expect(row.locator("a[href='/queues/ui-workers']")).to_be_visible()
    expect(page.locator("#workers-summary")).to_contain_text("gone quiet")


def test_the_pages_fit_a_phone_screen_and_are_keyboard_reachable(browser: Browser, srv: ServerProcess) -> None:
    job_id = dead_letter(srv.grpc_target, "ui-phone", error="e" * 300)
    context = browser.new_context(viewport={"width": 360, "height": 740}, is_mobile=True, has_touch=True)
    try:
        pg = context.new_page()
        for path in ("/", "/enqueue", "/dead", "/queues/ui-phone", f"/jobs/{job_id}"):
            pg.goto(srv.http_url + path)
            overflow = pg.evaluate("document.documentElement.scrollWidth - window.innerWidth")
            assert overflow <= 0, f"{path} scrolls sideways by {overflow}px"
        pg.goto(srv.http_url + "/enqueue")
        pg.keyboard.press("Tab")
        expect(pg.locator("a.skip")).to_be_focused()
        pg.keyboard.press("Enter")
        focused = [pg.evaluate("document.activeElement.id")]
        for _ in range(12):
            pg.keyboard.press("Tab")
            focused.append(pg.evaluate("document.activeElement.id || document.activeElement.name"))
        assert "queue" in focused and "job_type" in focused
    finally:
        context.close()
