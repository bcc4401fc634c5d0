"""The admin web UI over plain HTTP (no browser): headers, URLs, limits, search, htmx login redirects."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest
from support.admin import AdminStubs, connect
from support.servers import backend_config

from sepp.testing import ServerProcess

ServerFactory = Callable[..., ServerProcess]


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory, backend: str) -> Iterator[ServerProcess]:
    config = {"sweep_interval": 0.05, **backend_config(backend)}
    with ServerProcess(Path(tmp_path_factory.mktemp("ui-http")), config) as proc:
        yield proc


@pytest.fixture
def web(srv: ServerProcess) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=srv.http_url, timeout=20) as client:
        yield client


@pytest.fixture
def stubs(srv: ServerProcess) -> Iterator[AdminStubs]:
    with connect(srv.grpc_target) as s:
        yield s


def csrf(web: httpx.Client, path: str = "/enqueue") -> str:
    match = re.search(r'name="csrf_token" value="([^"]+)"', web.get(path).text)
    assert match
    return match[1]


def test_pages_carry_a_strict_content_security_policy(web: httpx.Client) -> None:
    resp = web.get("/")
    assert resp.status_code == 200
    csp = resp.headers["content-security-policy"]
    assert "script-src 'self'" in csp and "unsafe-inline" not in csp and "frame-ancestors 'none'" in csp
    assert resp.headers["x-content-type-options"] == "nosniff"
    assert web.get("/static/vendor/htmx.org/htmx.min.js").status_code == 200
    assert "Zero-Clause BSD" in web.get("/static/vendor/htmx.org/LICENSE").text


def test_queue_names_with_every_allowed_character_work_in_urls(web: httpx.Client, stubs: AdminStubs) -> None:
    stubs.enqueue("a:b.c-d_9")
    for path in ("/queues/a:b.c-d_9", "/queues/a%3Ab.c-d_9", "/ui/partials/queue/a%3Ab.c-d_9?state=ready"):
        resp = web.get(path)
        assert resp.status_code == 200, path
        assert "a:b.c-d_9" in resp.text or "a%3Ab.c-d_9" in resp.text
    assert 'href="/queues/a%3Ab.c-d_9"' in web.get("/").text
    assert web.get("/queues/nope").status_code == 404


def test_find_goes_to_the_job_by_id_or_idempotency_key(web: httpx.Client, stubs: AdminStubs) -> None:
    job_id = stubs.enqueue("ui-find", idempotency_key="k/1 & more")
    by_id = web.get("/find", params={"q": job_id})
    assert by_id.status_code == 303 and by_id.headers["location"] == f"/jobs/{job_id}"
    by_key = web.get("/find", params={"queue": "ui-find", "key": "k/1 & more"})
    assert by_key.status_code == 303 and by_key.headers["location"] == f"/jobs/{job_id}"
    assert web.get("/find", params={"q": "01900000-0000-7000-8000-000000000000"}).status_code == 404
    assert web.get("/find", params={"q": "nonsense"}).status_code == 400


def test_the_form_takes_a_payload_at_the_queue_limit(web: httpx.Client, stubs: AdminStubs) -> None:
    token = csrf(web)
    body = {"csrf_token": token, "queue": "ui-big", "job_type": "t", "encoding": "text/plain",
            "payload_format": "text", "payload": "x" * 1_048_576}
    ok = web.post("/enqueue", data=body)
    assert ok.status_code == 200 and 'id="ack-job-id"' in ok.text
    over = web.post("/enqueue", data={**body, "payload": "x" * 1_048_577})
    assert over.status_code == 400 and "PayloadTooLarge" in over.text


def test_a_form_value_without_a_wire_form_is_reported_as_invalid_argument(web: httpx.Client) -> None:
    body = {"csrf_token": csrf(web), "queue": "ui-bad", "job_type": "t", "custom_key": "n", "custom_type": "int",
            "custom_value": "12x"}
    resp = web.post("/enqueue", data=body)
    assert resp.status_code == 400 and "InvalidArgument" in resp.text and "custom[n]" in resp.text


def test_scheduled_time_is_read_in_its_time_zone(web: httpx.Client, stubs: AdminStubs) -> None:
    import datetime as dt
    from zoneinfo import ZoneInfo

    from sepp.api.v1 import admin_pb2 as apb

    body = {"csrf_token": csrf(web), "queue": "ui-tz", "job_type": "t", "scheduled_at": "2099-01-02T03:04:05",
            "scheduled_tz": "Asia/Tokyo"}
    resp = web.post("/enqueue", data=body)
    assert resp.status_code == 400 and "ScheduledTooFar" in resp.text  # past the 365-day horizon
    wall = (dt.datetime.now(ZoneInfo("Asia/Tokyo")) + dt.timedelta(days=2)).replace(second=0, microsecond=0)
    body["scheduled_at"] = wall.strftime("%Y-%m-%dT%H:%M")
    ack = web.post("/enqueue", data=body)
    match = re.search(r'id="ack-job-id">([0-9a-f-]{36})<', ack.text)
    assert match, ack.text[:500]
    job = stubs.call("GetJob", apb.GetJobRequest(job_id=match[1]))
    assert job.state == 1  # SCHEDULED
    assert job.run_at.ToDatetime(dt.UTC) == wall.astimezone(dt.UTC)


def test_htmx_polls_get_a_login_redirect_header_when_auth_is_on(server_factory: ServerFactory) -> None:
    server = server_factory(admin_token="t0k")
    with httpx.Client(base_url=server.http_url) as web:
        poll = web.get("/ui/partials/dashboard", headers={"HX-Request": "true"})
        assert poll.status_code == 200 and poll.headers["HX-Redirect"].startswith("/login?next=")
        page = web.get("/dead")
        assert page.status_code == 303 and page.headers["location"] == "/login?next=%2Fdead"
        token = csrf(web, "/login")
        evil = web.post("/login", data={"csrf_token": token, "token": "t0k", "next": "//evil.example/"})
        assert evil.status_code == 303 and evil.headers["location"] == "/"
        assert web.get("/").status_code == 200
        assert web.get("/metrics").status_code == 200 and web.get("/healthz").status_code == 200


def test_metrics_count_commits_as_a_counter(server_factory: ServerFactory) -> None:
    server = server_factory()
    with httpx.Client(base_url=server.http_url) as web:
        def commits() -> float:
            text = web.get("/metrics").text
            assert "# TYPE sepp_commits_total counter" in text
            return float(re.search(r"^sepp_commits_total (\S+)$", text, re.M)[1])  # type: ignore[index]

        before = commits()
        with connect(server.grpc_target) as stubs:
            stubs.enqueue("metered")  # one write: one more commit
        assert commits() >= before + 1


def test_the_queue_page_shows_what_each_flow_limit_holds_back(web: httpx.Client, stubs: AdminStubs) -> None:
    from sepp.api.v1 import admin_pb2 as apb
    from sepp.api.v1 import common_pb2 as pb

    stubs.call("DeclareQueue", apb.DeclareQueueRequest(name="ui-held", settings=pb.QueueSettings(
        max_in_flight=1, concurrency_key="tenant_id", max_in_flight_per_key=2)))
    for _ in range(3):
        stubs.enqueue("ui-held", custom={"tenant_id": pb.CustomValue(string_value="a")})
    page = web.get("/queues/ui-held").text
    assert "held back by the flow limits" in page
    assert 'data-limit="max_in_flight">2<' in page          # 3 READY, 1 slot
    assert 'data-limit="per_key">1<' in page                # tenant a: 2 at once, its third waits
    assert 'data-limit="total">2<' in page
    assert 'data-limit="rate_limit"' not in page            # not a limit of this queue
    stubs.enqueue("ui-free")
    assert "held back by the flow limits" not in web.get("/queues/ui-free").text
