"""DEFERRED wherever a state is shown (docs/workflows.md), against a real server on each
backend: the queue stats (count, oldest DEFERRED age), a listing of DEFERRED jobs, a job's
``waiting_on``, the ``/metrics`` state gauge and oldest-DEFERRED age, the UI's queue tabs,
jobs list and job page, and the CLI's state filter and ``jobs show``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.request
from collections.abc import Iterator

import httpx
import pytest
from support.servers import module_server
from support.waiting import wait_for

from sepp import Client, EnqueueRequest
from sepp.client.admin import AdminClient
from sepp.testing import ServerProcess


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory, backend: str) -> Iterator[ServerProcess]:
    """Queue gauges read at every scrape, so ``/metrics`` shows the store as it is."""
    yield from module_server(tmp_path_factory, backend, metrics_gauge_interval=0.0)


@pytest.fixture(scope="module")
def waiting(srv: ServerProcess) -> tuple[str, str, str]:
    """(queue, the dependency's id, the DEFERRED job's id): one job waiting for one READY job."""
    with Client(srv.grpc_target) as c:
        dep = c.enqueue(EnqueueRequest("shown-dep", "first")).job_id
        child = c.enqueue(EnqueueRequest("shown-child", "second").with_depends_on([dep])).job_id
    return "shown-child", dep, child


def test_the_admin_api_counts_lists_and_explains_a_deferred_job(srv: ServerProcess,
                                                                waiting: tuple[str, str, str]) -> None:
    queue, dep, child = waiting
    with AdminClient(srv.grpc_target) as admin:
        (stats,) = admin.queue_stats([queue])
        assert (stats.deferred, stats.ready) == (1, 0)
        assert stats.HasField("oldest_deferred_age") and stats.oldest_deferred_age.seconds >= 0
        (other,) = admin.queue_stats(["shown-dep"])
        assert other.deferred == 0 and not other.HasField("oldest_deferred_age")
        assert [s.job.id for s in admin.list_jobs(queue=queue, state="deferred").jobs] == [child]
        assert [s.job.id for s in admin.list_jobs(state="DEFERRED").jobs] == [child]
        assert admin.list_jobs(queue="shown-dep", state="deferred").jobs == []
        assert list(admin.get_job(child).waiting_on) == [dep]
        assert list(admin.get_job(dep).waiting_on) == []


def _samples(srv: ServerProcess) -> str | None:
    with urllib.request.urlopen(srv.http_url + "/metrics", timeout=10) as resp:
        text: str = resp.read().decode()
    return text if "sepp_queue_gauges_age_seconds" in text else None


def test_metrics_show_the_deferred_state_and_the_oldest_deferred_age(srv: ServerProcess,
                                                                     waiting: tuple[str, str, str]) -> None:
    queue, _, _ = waiting
    text = wait_for(lambda: _samples(srv), timeout=20, what="a scrape with the queue gauges")
    assert f'sepp_queue_jobs{{queue="{queue}",state="deferred"}} 1.0' in text
    assert 'sepp_queue_jobs{queue="shown-dep",state="deferred"} 0.0' in text
    line = next(ln for ln in text.splitlines()
                if ln.startswith(f'sepp_queue_oldest_deferred_age_seconds{{queue="{queue}"}}'))
    assert float(line.split()[-1]) >= 0
    assert 'sepp_queue_oldest_deferred_age_seconds{queue="shown-dep"} 0' in text


def test_the_ui_has_a_deferred_tab_and_the_job_page_says_what_it_waits_for(
        srv: ServerProcess, waiting: tuple[str, str, str]) -> None:
    queue, dep, child = waiting
    with httpx.Client(base_url=srv.http_url, timeout=20) as web:
        page = web.get(f"/queues/{queue}")
        assert page.status_code == 200
        assert 'class="card state-deferred" aria-current="true"' in page.text  # opens on the tab with jobs
        assert child in page.text and "oldest DEFERRED job waiting" in page.text
        assert child in web.get("/jobs?state=deferred").text
        assert child not in web.get(f"/queues/{queue}?state=ready").text
        job = web.get(f"/jobs/{child}")
        assert "Waiting for 1 dependency" in job.text and f'href="/jobs/{dep}"' in job.text
        assert "Waiting for" not in web.get(f"/jobs/{dep}").text
        assert ">DEFERRED<" in web.get("/").text


def _sepp(*args: str, server: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SEPP_")}
    return subprocess.run([sys.executable, "-m", "sepp", *args, "--server", server], capture_output=True,
                          text=True, env=env, timeout=60, input="")


def test_the_cli_filters_on_deferred_and_shows_what_a_job_waits_for(srv: ServerProcess,
                                                                    waiting: tuple[str, str, str]) -> None:
    queue, dep, child = waiting
    listed = _sepp("jobs", "list", "--state", "deferred", "--queue", queue, "--json", server=srv.grpc_target)
    assert listed.returncode == 0, listed.stderr
    assert [j["id"] for j in json.loads(listed.stdout)["jobs"]] == [child]
    shown = _sepp("jobs", "show", child, "--json", server=srv.grpc_target)
    assert shown.returncode == 0, shown.stderr
    data = json.loads(shown.stdout)
    assert (data["state"], data["waiting_on"]) == ("DEFERRED", [dep])
    human = _sepp("jobs", "show", child, server=srv.grpc_target)
    assert "waiting_on" in human.stdout and dep in human.stdout
    queues = _sepp("queues", "show", queue, "--json", server=srv.grpc_target)
    assert queues.returncode == 0, queues.stderr
    shown_queue = json.loads(queues.stdout)
    assert shown_queue["counts"]["deferred"] == 1 and shown_queue["oldest_deferred_age"] >= 0
