"""The job page of a job that is not finished refreshes its live part by itself (htmx polls
``/ui/partials/jobs/{id}``): the fragment shows the state and the progress the handler
reported, a poll that finds nothing changed is an empty 204, and once the job is finished
the fragment comes without the trigger and with status 286 (htmx stops polling), showing
the result. Over plain HTTP on a real server, each backend."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator

import httpx
import pytest
from google.protobuf import duration_pb2, timestamp_pb2
from support.admin import AdminStubs, connect
from support.servers import module_server
from support.stubs import CALL_TIMEOUT

from sepp.api.v1 import admin_pb2 as apb
from sepp.api.v1 import common_pb2 as pb
from sepp.api.v1 import worker_pb2 as wpb
from sepp.testing import ServerProcess

pytestmark = pytest.mark.timeout(60)

TRIGGER = re.compile(r'hx-trigger="every (\d+)s"')


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory, backend: str) -> Iterator[ServerProcess]:
    yield from module_server(tmp_path_factory, backend)


@pytest.fixture
def web(srv: ServerProcess) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=srv.http_url, timeout=20) as client:
        yield client


@pytest.fixture
def stubs(srv: ServerProcess) -> Iterator[AdminStubs]:
    with connect(srv.grpc_target) as s:
        yield s


def _progress(stubs: AdminStubs, job_id: str, lease_id: str, value: object) -> None:
    stubs.worker.ExtendLease(wpb.ExtendLeaseRequest(job_id=job_id, lease_id=lease_id, progress=json.dumps(value),
                                                    extend_by=duration_pb2.Duration(seconds=30)),
                             timeout=CALL_TIMEOUT)


def _live(page: str) -> str:
    """The ``#job-live`` element's opening tag."""
    match = re.search(r'<div id="job-live"[^>]*>', page)
    assert match, "no live part on the page"
    return match[0]


def _poll_url(tag: str) -> str:
    match = re.search(r'hx-get="([^"]+)"', tag)
    assert match, tag
    return match[1].replace("&amp;", "&")


def test_a_running_jobs_page_polls_until_it_completes_then_shows_the_result(
        web: httpx.Client, stubs: AdminStubs, fresh_queue: str) -> None:
    job_id = stubs.enqueue(fresh_queue, "crunch")
    ready = web.get(f"/jobs/{job_id}")
    assert ready.status_code == 200
    tag = _live(ready.text)
    assert f'hx-get="/ui/partials/jobs/{job_id}?v=' in tag and 'hx-swap="outerHTML"' in tag
    match = TRIGGER.search(tag)
    assert match and 1 <= int(match[1]) <= 5, tag
    assert "None reported yet." in ready.text

    unchanged = web.get(_poll_url(tag))
    assert unchanged.status_code == 204 and unchanged.text == ""  # nothing to swap in

    lease = stubs.reserve_job(fresh_queue, job_id).lease_id
    _progress(stubs, job_id, lease, 0.25)
    part = web.get(_poll_url(tag))  # the page's poll, after the job changed
    assert part.status_code == 200 and _poll_url(_live(part.text)) != _poll_url(tag)
    assert web.get(_poll_url(_live(part.text))).status_code == 204
    assert TRIGGER.search(_live(part.text)) and 'data-state="reserved"' in _live(part.text)
    assert ">RESERVED</span>" in part.text
    assert '<progress id="job-progress-bar" max="100" value="25.0"' in part.text
    assert '<strong id="job-progress-text">25%</strong>' in part.text
    assert "<html" not in part.text  # a fragment, not a page

    _progress(stubs, job_id, lease, {"done": 3, "total": 4, "stage": "copy"})
    text = web.get(f"/ui/partials/jobs/{job_id}").text
    assert "75%" in text and '<th scope="row">stage</th><td>copy</td>' in text
    assert '<th scope="row">done</th><td>3</td>' in text

    stubs.worker.Ack(wpb.AckRequest(job_id=job_id, lease_id=lease, result=pb.Payload(
        data=b'{"rows": 4}', encoding="application/json")), timeout=CALL_TIMEOUT)
    done = web.get(f"/ui/partials/jobs/{job_id}")
    assert done.status_code == 286  # htmx: stop polling
    tag = _live(done.text)
    assert "hx-trigger" not in tag and "hx-get" not in tag and 'data-state="completed"' in tag
    assert ">COMPLETED</span>" in done.text
    assert 'class="result result-json"' in done.text and "&#34;rows&#34;: 4" in done.text
    assert "75%" in done.text  # the last progress stays shown
    page = web.get(f"/jobs/{job_id}")
    assert page.status_code == 200 and "hx-trigger" not in _live(page.text)
    assert 'class="result result-json"' in page.text


def test_a_scheduled_job_polls_and_a_dead_lettered_or_cancelled_one_does_not(
        web: httpx.Client, stubs: AdminStubs, fresh_queue: str) -> None:
    later = stubs.enqueue(fresh_queue, scheduled_at=timestamp_pb2.Timestamp(seconds=int(time.time()) + 3600))
    assert 'data-state="scheduled"' in _live(web.get(f"/jobs/{later}").text)
    assert TRIGGER.search(_live(web.get(f"/jobs/{later}").text))
    dead = stubs.dead_letter(fresh_queue)
    assert "hx-trigger" not in _live(web.get(f"/jobs/{dead}").text)
    assert web.get(f"/ui/partials/jobs/{dead}").status_code == 286
    stubs.call("CancelJob", apb.CancelJobRequest(job_id=later))
    part = web.get(f"/ui/partials/jobs/{later}")
    assert part.status_code == 286 and "hx-trigger" not in _live(part.text) and ">CANCELLED</span>" in part.text


def test_a_job_deleted_while_its_page_polls_stops_the_polling(
        web: httpx.Client, stubs: AdminStubs, fresh_queue: str) -> None:
    job_id = stubs.enqueue(fresh_queue)
    assert web.get(f"/ui/partials/jobs/{job_id}").status_code == 200
    stubs.call("DeleteJob", apb.DeleteJobRequest(job_id=job_id))
    gone = web.get(f"/ui/partials/jobs/{job_id}")
    assert gone.status_code == 286 and "This job is gone" in gone.text and "hx-trigger" not in gone.text
