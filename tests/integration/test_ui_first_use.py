"""What a new user meets first in the web UI (each was a rough edge once), over plain
HTTP against a real server: state spellings in URLs, one spelling shown, finished jobs without
lease fields, the redrive marker in the attempts table, a dead-letter reason shown once, the
enqueue form's JSON check and fresh idempotency key, ``/favicon.ico`` and ``/queues``."""

from __future__ import annotations

import re
from collections.abc import Iterator

import httpx
import pytest
from support.admin import AdminStubs, connect

from sepp.api.v1 import admin_pb2 as apb
from sepp.api.v1 import worker_pb2 as wpb
from sepp.testing import ServerProcess

pytestmark = pytest.mark.sqlite_only(reason="backend-neutral: UI rendering and URL parsing, the same on both backends")


@pytest.fixture
def web(shared_server: ServerProcess) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=shared_server.http_url, timeout=20) as client:
        yield client


@pytest.fixture
def stubs(shared_server: ServerProcess) -> Iterator[AdminStubs]:
    with connect(shared_server.grpc_target) as s:
        yield s


def csrf(web: httpx.Client) -> str:
    match = re.search(r'name="csrf_token" value="([^"]+)"', web.get("/enqueue").text)
    assert match
    return match[1]


@pytest.mark.parametrize("spelling", ["dead_lettered", "DEAD_LETTERED", "dead-lettered", "Dead lettered", "5"])
def test_every_spelling_of_a_state_opens_its_tab(web: httpx.Client, stubs: AdminStubs, fresh_queue: str,
                                                 spelling: str) -> None:
    job_id = stubs.dead_letter(fresh_queue, reason="no handler", error="no handler")
    page = web.get(f"/queues/{fresh_queue}", params={"state": spelling})
    assert page.status_code == 200
    assert "Jobs: DEAD_LETTERED" in page.text and job_id in page.text


def test_an_unknown_state_is_a_400_naming_the_states_not_the_ready_tab(web: httpx.Client, stubs: AdminStubs,
                                                                        fresh_queue: str) -> None:
    stubs.enqueue(fresh_queue)
    page = web.get(f"/queues/{fresh_queue}", params={"state": "deadlettered"})
    assert page.status_code == 400
    assert "unknown job state" in page.text and "DEAD_LETTERED" in page.text
    assert "Jobs: READY" not in page.text
    assert web.get(f"/queues/{fresh_queue}", params={"state": ""}).status_code == 200  # absent = READY


def test_the_dashboard_spells_states_as_the_api_does(web: httpx.Client) -> None:
    page = web.get("/").text
    assert "DEAD_LETTERED" in page and "Dead-lettered" not in page and ">Dead<" not in page


def test_a_finished_job_shows_no_lease_fields_and_a_reserved_one_does(web: httpx.Client, stubs: AdminStubs,
                                                                      fresh_queue: str) -> None:
    dead = stubs.dead_letter(fresh_queue, worker_id="w-finished")
    page = web.get(f"/jobs/{dead}").text
    assert ">lease_id<" not in page and ">lease_expires_at<" not in page and ">worker_id<" not in page
    assert "w-finished" in page  # still in the attempts table
    held = stubs.enqueue(fresh_queue)
    stubs.reserve_job(fresh_queue, held, worker_id="w-holding")
    page = web.get(f"/jobs/{held}").text
    assert ">lease_id<" in page and ">lease_expires_at<" in page and "w-holding" in page


def test_a_redrive_is_marked_in_the_attempts_table(web: httpx.Client, stubs: AdminStubs, fresh_queue: str) -> None:
    job_id = stubs.dead_letter(fresh_queue, error="first life", max_attempts=1)
    assert "Requeued" not in web.get(f"/jobs/{job_id}").text
    stubs.call("RequeueJob", apb.RequeueJobRequest(job_id=job_id))
    page = web.get(f"/jobs/{job_id}").text
    assert "Requeued: the next attempt is number 1." in page
    r = stubs.reserve_job(fresh_queue, job_id)
    stubs.worker.Nack(wpb.NackRequest(job_id=job_id, lease_id=r.lease_id, dead_letter="again",
                                      error=wpb.JobError(message="second life")), timeout=10)
    page = web.get(f"/jobs/{job_id}").text
    assert page.count("Requeued (redrive): the attempts below restart at 1.") == 1
    assert page.index("first life") < page.index("Requeued (redrive)") < page.index("second life")


def test_a_dead_letter_reason_that_quotes_the_error_is_shown_once(web: httpx.Client, stubs: AdminStubs,
                                                                  fresh_queue: str) -> None:
    stubs.dead_letter(fresh_queue, reason="no handler registered for t", error="no handler registered for t")
    page = web.get(f"/queues/{fresh_queue}", params={"state": "dead_lettered"}).text
    assert page.count("no handler registered for t") == 1
    stubs.dead_letter(fresh_queue, reason="bad input", error="KeyError: user_id")
    page = web.get(f"/queues/{fresh_queue}", params={"state": "dead_lettered"}).text
    assert "NACK_DEAD_LETTER: bad input" in page and "KeyError: user_id" in page  # different: both shown


@pytest.mark.parametrize(("payload", "encoding", "refused"), [
    ("", "application/json", "the payload is empty"),
    ("   ", "application/json; charset=utf-8", "the payload is empty"),
    ("{not json", "application/json", "not valid JSON"),
    ("", "application/vnd.sepp+json", "the payload is empty"),
    ("", "text/plain", None),
    ("", "", None),
    ("null", "application/json", None),
])
def test_the_form_checks_a_json_payload_before_sending(web: httpx.Client, fresh_queue: str, payload: str,
                                                       encoding: str, refused: str | None) -> None:
    body = {"csrf_token": csrf(web), "queue": fresh_queue, "job_type": "t", "payload_format": "text",
            "payload": payload, "encoding": encoding}
    resp = web.post("/enqueue", data=body)
    if refused is None:
        assert resp.status_code == 200 and 'id="ack-job-id"' in resp.text
    else:
        assert resp.status_code == 400 and refused in resp.text and "Not sent" in resp.text


def test_each_form_load_offers_a_fresh_key_and_resubmitting_one_form_stores_one_job(
        web: httpx.Client, fresh_queue: str) -> None:
    keys = [re.search(r'id="idempotency_key" name="idempotency_key" value="([^"]*)"', web.get("/enqueue").text)
            for _ in range(2)]
    assert keys[0] and keys[1] and keys[0][1] != keys[1][1] and keys[0][1].startswith("ui-")
    body = {"csrf_token": csrf(web), "queue": fresh_queue, "job_type": "t", "payload_format": "text",
            "payload": "{}", "encoding": "application/json", "idempotency_key": keys[0][1]}
    first, second = web.post("/enqueue", data=body), web.post("/enqueue", data=body)
    ids = [re.search(r'id="ack-job-id">([0-9a-f-]{36})<', r.text) for r in (first, second)]
    assert ids[0] and ids[1] and ids[0][1] == ids[1][1]
    assert 'id="ack-dedup">true<' in second.text and 'id="enqueue-another"' in second.text


def test_the_favicon_is_served(web: httpx.Client) -> None:
    resp = web.get("/favicon.ico")
    assert resp.status_code == 200 and resp.headers["content-type"] == "image/x-icon"
    assert resp.content[:4] == b"\x00\x00\x01\x00"  # an ICO header


def test_queues_leads_to_the_dashboards_queue_list(web: httpx.Client) -> None:
    # a new user's trial (2026-12-03): the README's "queues" page, typed as /queues, was a 404
    resp = web.get("/queues", follow_redirects=False)
    assert resp.status_code == 307 and resp.headers["location"] == "/#queues-h"
    page = web.get("/queues", follow_redirects=True)
    assert page.status_code == 200 and 'id="queues-h"' in page.text


def test_the_chart_windows_reach_back_24_hours(web: httpx.Client, stubs: AdminStubs, fresh_queue: str) -> None:
    stubs.enqueue(fresh_queue)
    for path in ("/", f"/queues/{fresh_queue}", "/ui/partials/dashboard", f"/ui/partials/queue/{fresh_queue}"):
        for window, per in (("1h", "per minute"), ("6h", "per 5 minutes"), ("24h", "per 20 minutes")):
            page = web.get(path, params={"window": window})
            assert page.status_code == 200 and f"{per} over the last" in page.text, (path, window)
            assert f'window={window}" aria-current="true"' in page.text
            assert "&amp;amp;" not in page.text
            assert f"window={window}" in page.text.split("hx-get=", 1)[1][:200]  # polling keeps the window
        assert web.get(path, params={"window": "2d"}).status_code == 400


@pytest.mark.parametrize("field", [{"expected": "²"}, {"expected": "1", "before": "²"}, {"expected": "١"}])
def test_a_bulk_confirm_form_with_non_ascii_digits_is_a_400_not_a_500(web: httpx.Client, stubs: AdminStubs,
                                                                      fresh_queue: str, field: dict[str, str]) -> None:
    """Found by attacking (attack notes F3): ``str.isdigit`` is true for "²" and "١", and
    ``int("²")`` raises — the bulk run's confirmed count (and snapshot) answered 500 with a
    traceback in the server log. Only ASCII digits are whole numbers here."""
    job_id = stubs.enqueue(fresh_queue)
    page = web.get(f"/queues/{fresh_queue}/bulk", params={"action": "cancel", "state": "ready"})
    match = re.search(r'name="csrf_token" value="([^"]+)"', page.text)
    assert match
    form = {"csrf_token": match[1], "action": "cancel", "state": "ready", **field}
    answer = web.post(f"/queues/{fresh_queue}/bulk/run", data=form, follow_redirects=False)
    assert answer.status_code == 400 and "whole number" in answer.text
    assert web.get(f"/queues/{fresh_queue}", params={"state": "١"}).status_code == 400  # not state 1
    assert job_id in web.get(f"/queues/{fresh_queue}").text  # nothing was cancelled


def test_the_dashboard_says_which_dead_letter_figure_is_now_and_which_is_events(web: httpx.Client, stubs: AdminStubs,
                                                                              fresh_queue: str) -> None:
    """A new user read the card (dead-lettered now) and the chart legend (dead-lettered during
    the window) as one figure that disagreed with itself: each is labelled."""
    job_id = stubs.dead_letter(fresh_queue)
    stubs.call("RequeueJob", apb.RequeueJobRequest(job_id=job_id))  # still an event, no longer dead now
    page = web.get("/").text
    assert re.search(r'<span class="l">DEAD_LETTERED now</span>', page)
    legend = re.search(r'<span class="key dead"[^>]*>([^<]*)</span>', page)
    assert legend and legend[1].strip().endswith("dead-lettered (events in window)"), legend
    assert int(legend[1].split()[0].replace(",", "")) >= 1


@pytest.mark.parametrize("path", ["/jobs", "/jobs?state=completed", "/busy", "/retries", "/ui/partials/busy"])
def test_jobs_busy_and_retries_are_pages_not_404s(web: httpx.Client, path: str) -> None:
    page = web.get(path)
    assert page.status_code == 200, (path, page.status_code)
    assert "Not found" not in page.text


def test_a_ticked_rows_form_refuses_a_foreign_back_url_and_an_unknown_state(web: httpx.Client, stubs: AdminStubs,
                                                                          fresh_queue: str) -> None:
    job_id = stubs.dead_letter(fresh_queue)
    token = csrf(web)
    form = {"csrf_token": token, "action": "requeue", "state": "dead-lettered", "job_id": job_id,
            "back": "https://evil.example/"}
    answer = web.post("/jobs/bulk", data=form, follow_redirects=False)
    assert answer.status_code == 303 and answer.headers["location"] == "/"  # never off-site
    assert stubs.call("GetJob", apb.GetJobRequest(job_id=job_id)).state == 2  # READY: it was done
    answer = web.post("/jobs/bulk", data={**form, "state": "bogus"}, follow_redirects=False)
    assert answer.status_code == 400
    answer = web.post("/jobs/bulk", data={**form, "csrf_token": "stale"}, follow_redirects=False)
    assert answer.status_code == 403


def test_ticked_rows_whose_job_changed_state_meanwhile_are_skipped_not_deleted(web: httpx.Client,
                                                                                stubs: AdminStubs,
                                                                                fresh_queue: str) -> None:
    """Found in an attack round: a dead letter ticked on /dead for Delete, requeued meanwhile and
    taken by a worker, was deleted under the running worker — the docs promise that a job
    whose state changed since the page was drawn is skipped and counted."""
    running = stubs.dead_letter(fresh_queue)
    still_dead = stubs.dead_letter(fresh_queue)
    stubs.call("RequeueJob", apb.RequeueJobRequest(job_id=running))  # someone else redrives it …
    stubs.reserve_job(fresh_queue, running, "busy-worker")  # … and a worker runs it now
    form = {"csrf_token": csrf(web), "action": "delete", "state": "dead_lettered",
            "job_id": [running, still_dead], "back": f"/dead?queue={fresh_queue}"}
    answer = web.post("/jobs/bulk", data=form, follow_redirects=False)
    assert answer.status_code == 303 and answer.headers["location"] == f"/dead?queue={fresh_queue}"
    assert stubs.call("GetJob", apb.GetJobRequest(job_id=running)).state == 3  # RESERVED: still there
    flash = web.get(answer.headers["location"]).text
    assert "Deleted 1 of 2 selected job(s); 1 skipped (1 were RESERVED)." in flash, flash[:3000]
    with pytest.raises(Exception, match=r"does not exist"):
        stubs.call("GetJob", apb.GetJobRequest(job_id=still_dead))
