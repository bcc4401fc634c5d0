"""Periodic schedules at the edges of a real server: ``sepp periodic list`` and
``trigger`` (and the other commands), the admin API's catalogued errors for a bad cron
expression, an unknown time zone, a bad ``every`` and an unknown field, and the UI's Periodic
page. One server for the module, on SQLite: the store's part is covered on both backends by
tests/storage/test_conformance_periodic.py and tests/engine/test_engine_periodic.py."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import grpc
import httpx
import pytest
from support.admin import AdminStubs, connect
from support.failures import fails
from support.servers import ServerFactory, module_server
from support.waiting import wait_for

from sepp.api.v1 import admin_pb2 as apb
from sepp.api.v1 import common_pb2 as pb
from sepp.api.v1 import periodic_pb2 as ppb
from sepp.server.periodic.spec import PeriodicSettings
from sepp.server.periodic.timetable import Timetable, rfc3339
from sepp.testing import ServerProcess

pytestmark = pytest.mark.sqlite_only(reason="CLI, admin-API and UI edges; the store parts run on both backends")

NIGHTLY = {"name": "nightly-report", "cron": "0 3 * * *", "timezone": "Europe/Berlin", "queue": "reports",
           "job_type": "build_report", "payload": '{"kind": "nightly"}', "custom": {"region": "eu"}, "priority": 7}


def sepp(*args: str, server: str, columns: int = 200) -> subprocess.CompletedProcess[str]:
    """Run ``sepp ARGS --server SERVER`` in a subprocess (no SEPP_* variables, no terminal)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SEPP_")} | {"COLUMNS": str(columns)}
    return subprocess.run([sys.executable, "-m", "sepp", *args, "--server", server], capture_output=True, text=True,
                          env=env, timeout=60, input="")


def ok_json(*args: str, server: str) -> Any:
    """Run with ``--json``, expect exit 0, parse stdout."""
    result = sepp(*args, "--json", server=server)
    assert result.returncode == 0, result.stderr + result.stdout
    return json.loads(result.stdout)


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory, backend: str) -> Iterator[ServerProcess]:
    yield from module_server(tmp_path_factory, backend, periodic=[NIGHTLY])


@pytest.fixture
def stubs(srv: ServerProcess) -> Iterator[AdminStubs]:
    with connect(srv.grpc_target) as s:
        yield s


def test_periodic_list_shows_the_next_three_runs_and_the_last_run(srv: ServerProcess) -> None:
    (listed,) = [p for p in ok_json("periodic", "list", server=srv.grpc_target) if p["name"] == "nightly-report"]
    now = int(datetime.now(UTC).timestamp()) * 1_000_000
    expected = [rfc3339(t) for t in Timetable(PeriodicSettings(**NIGHTLY)).upcoming(now, 3)]  # type: ignore[arg-type]
    assert listed["next_runs"] == expected and all(t.endswith(("T01:00:00Z", "T02:00:00Z")) for t in expected)
    assert (listed["source"], listed["paused"], listed["queue"], listed["custom"]) == ("config", False, "reports",
                                                                                        {"region": "eu"})
    human = sepp("periodic", "list", server=srv.grpc_target)
    assert human.returncode == 0, human.stderr
    assert "nightly-report" in human.stdout and "cron 0 3 * * * (Europe/Berlin)" in human.stdout
    assert expected[0] in human.stdout and "schedule(s)" in human.stdout


def test_periodic_trigger_enqueues_the_job_and_list_shows_it_as_the_last_run(srv: ServerProcess,
                                                                             stubs: AdminStubs) -> None:
    made = ok_json("periodic", "trigger", "nightly-report", server=srv.grpc_target)
    job = stubs.call("GetJob", apb.GetJobRequest(job_id=made["job_id"]))
    assert (job.queue, job.job_type, job.payload.data, job.priority) == ("reports", "build_report",
                                                                         b'{"kind": "nightly"}', 7)
    assert job.idempotency_key.startswith("periodic:nightly-report:trigger:")
    assert job.custom["region"].string_value == "eu"
    (listed,) = [p for p in ok_json("periodic", "list", server=srv.grpc_target) if p["name"] == "nightly-report"]
    assert listed["last_job_id"] == made["job_id"] and listed["last_run_at"] and listed["last_tick"] is None
    human = sepp("periodic", "trigger", "nightly-report", server=srv.grpc_target)
    assert human.returncode == 0 and "Triggered nightly-report: job " in human.stdout


def test_periodic_show_prints_a_readable_view_with_no_python_reprs(srv: ServerProcess) -> None:
    # `show` once printed `custom: {'region': 'eu'}` and the payload as one string.
    target = srv.grpc_target
    made = ok_json("periodic", "trigger", "nightly-report", server=target)["job_id"]
    doc = ok_json("periodic", "show", "nightly-report", server=target)
    human = sepp("periodic", "show", "nightly-report", server=target)
    assert human.returncode == 0, human.stderr
    text = human.stdout
    for repr_leak in ("datetime.", "{'", "['", "('", "None", "True", "False", "Timestamp"):
        assert repr_leak not in text, (repr_leak, text)
    assert text.startswith("schedule nightly-report  active")
    fields = {line.split()[0]: line.split(None, 1)[1].strip() for line in text.splitlines()
              if len(line.split(None, 1)) == 2 and line.split()[0] in (
                  "cron", "timezone", "queue", "job_type", "priority", "next_runs", "last_run_at", "last_job_id")}
    assert fields["cron"] == "0 3 * * *" and fields["timezone"] == "Europe/Berlin"
    assert (fields["queue"], fields["job_type"], fields["priority"]) == ("reports", "build_report", "7")
    assert fields["next_runs"] == doc["next_runs"][0] and all(t in text for t in doc["next_runs"])
    assert fields["last_run_at"].startswith(doc["last_run_at"] + " (") and fields["last_job_id"] == made
    assert re.search(r'payload \(19 bytes, encoding application/json\)\n\{\n  "kind": "nightly"\n\}', text), text
    assert re.search(r"region\s+string\s+eu", text), text  # the custom map as a key / type / value table
    assert set(doc) >= {"name", "cron", "timezone", "custom", "next_runs", "last_job_id"}  # --json: as before
    assert doc["custom"] == {"region": "eu"} and doc["payload"] == '{"kind": "nightly"}'


def test_periodic_list_shows_the_last_job_id_whole_on_a_narrow_terminal(srv: ServerProcess) -> None:
    # The newuser trial: with long queue / job type names the id was cut ("01a23511-e110-737a-9a06-ada2107b…"),
    # no use to `sepp jobs show`. Other columns wrap; the id never does.
    target = srv.grpc_target
    ok_json("periodic", "declare", "wide-names-schedule", "--queue", "a-queue-with-a-long-name-for-the-table",
            "--job-type", "a_job_type_with_a_long_name_too", "--cron", "0 3 * * *", "--timezone",
            "America/Argentina/Buenos_Aires", server=target)
    try:
        made = ok_json("periodic", "trigger", "wide-names-schedule", server=target)["job_id"]
        narrow = sepp("periodic", "list", server=target, columns=80)
        assert narrow.returncode == 0, narrow.stderr
        assert made in narrow.stdout, narrow.stdout
    finally:
        ok_json("periodic", "delete", "wide-names-schedule", "--yes", server=target)


@pytest.mark.parametrize(("fields", "field", "words"), [
    ({"cron": "0 25 * * *"}, "cron", "bad cron expression '0 25 * * *': Bad hour"),
    ({"cron": "0 3 * * *", "timezone": "Europe/Atlantis"}, "timezone", "unknown time zone 'Europe/Atlantis'"),
    ({"every": "15 minutes"}, "every", "is not a duration"),
    ({"every": "0s"}, "every", "between 1 s and 366 days"),
    ({"cron": "* * * * *", "every": "1m"}, "schedule", "exactly one of cron"),
    ({"every": "1m", "catch_up": "all"}, "catch_up", "'latest' or 'none'"),
    # Attack notes F5: names of the machine's setup, which differ between nodes.
    ({"cron": "0 3 * * *", "timezone": "localtime"}, "timezone", "'localtime' is this machine's setting"),
    ({"cron": "0 3 * * *", "timezone": "posixrules"}, "timezone", "not an IANA zone"),
    ({"cron": "0 3 * * *", "timezone": "right/UTC"}, "timezone", "not an IANA zone"),
])
def test_a_schedule_that_cannot_run_is_refused_at_the_admin_call_with_its_field(
        stubs: AdminStubs, fields: dict[str, str], field: str, words: str) -> None:
    schedule = ppb.PeriodicSchedule(name="bad", queue="q", job_type="t")
    for key, value in fields.items():
        setattr(schedule, key, value)
    request = ppb.DeclarePeriodicRequest(schedule=schedule)
    failure = fails(stubs.admin.DeclarePeriodic, request, timeout=10)
    assert (failure.code, failure.reason) == (grpc.StatusCode.INVALID_ARGUMENT, "PERIODIC_INVALID")
    assert failure.metadata == {"field": field, "schedule": "bad"} and words in failure.message
    assert all(p.schedule.name != "bad" for p in stubs.call("ListPeriodic", ppb.ListPeriodicRequest()).schedules)


def test_a_nan_in_the_custom_map_is_refused_saying_so(stubs: AdminStubs) -> None:
    """Attack notes F4: the refusal read "custom.k.bool: Input should be a valid boolean"."""
    schedule = ppb.PeriodicSchedule(name="bad", queue="q", job_type="t", every="1m",
                                    custom={"k": pb.CustomValue(float_value=float("nan"))})
    failure = fails(stubs.admin.DeclarePeriodic, ppb.DeclarePeriodicRequest(schedule=schedule), timeout=10)
    assert (failure.code, failure.reason) == (grpc.StatusCode.INVALID_ARGUMENT, "PERIODIC_INVALID")
    assert "custom['k'] = nan is not a finite number" in failure.message and "bool" not in failure.message


def test_sepp_periodic_declare_reports_the_refusal_with_its_field(srv: ServerProcess) -> None:
    result = sepp("periodic", "declare", "bad", "-q", "q", "-t", "t", "--cron", "0 25 * * *", "--json",
                  server=srv.grpc_target)
    assert result.returncode == 2, result.stdout + result.stderr
    doc = json.loads(result.stderr)
    assert (doc["reason"], doc["status"], doc["metadata"]) == ("PERIODIC_INVALID", "INVALID_ARGUMENT",
                                                               {"field": "cron", "schedule": "bad"})
    assert "Bad hour" in doc["error"]


def test_an_unknown_field_is_refused_not_dropped(stubs: AdminStubs) -> None:
    schedule = ppb.PeriodicSchedule(name="newer", every="1m", queue="q", job_type="t")
    raw = schedule.SerializeToString() + bytes([0xA8, 0x01, 0x05])  # field 21 (varint 5): not in this server's proto
    request = ppb.DeclarePeriodicRequest(schedule=ppb.PeriodicSchedule.FromString(raw))
    failure = fails(stubs.admin.DeclarePeriodic, request, timeout=10)
    assert (failure.code, failure.reason, failure.metadata["field"]) == (grpc.StatusCode.INVALID_ARGUMENT,
                                                                         "PERIODIC_INVALID", "#21")
    assert "unknown field number 21" in failure.message


def test_a_job_the_queue_would_refuse_is_refused_at_the_admin_call(stubs: AdminStubs) -> None:
    bad = ppb.PeriodicSchedule(name="big", every="1m", queue="q", job_type="t", payload=b"x" * 2_000_000)
    failure = fails(stubs.admin.DeclarePeriodic, ppb.DeclarePeriodicRequest(schedule=bad), timeout=10)
    assert (failure.reason, failure.metadata["field"]) == ("PERIODIC_INVALID", "payload.data")
    assert "PAYLOAD_TOO_LARGE" in failure.message


def test_declare_pause_resume_delete(srv: ServerProcess, stubs: AdminStubs) -> None:
    target = srv.grpc_target
    made = ok_json("periodic", "declare", "hourly", "-q", "q", "-t", "t", "--cron", "0 * * * *",
                   "--custom", "n:int=5", server=target)
    assert made["created"] is True and made["source"] == "admin" and len(made["next_runs"]) == 3
    assert made["custom"] == {"n": 5}
    again = stubs.call("DeclarePeriodic", ppb.DeclarePeriodicRequest(
        schedule=ppb.PeriodicSchedule(name="hourly", every="30m", queue="q", job_type="t")))
    assert again.created is False and (again.schedule.schedule.every, again.schedule.schedule.cron) == ("30m", "")
    paused = stubs.call("PausePeriodic", ppb.PausePeriodicRequest(name="hourly"))
    assert paused.paused is True and list(paused.next_runs) == []
    assert stubs.call("GetPeriodic", ppb.GetPeriodicRequest(name="hourly")).paused is True
    resumed = stubs.call("ResumePeriodic", ppb.ResumePeriodicRequest(name="hourly"))
    assert resumed.paused is False and resumed.next_runs[0].seconds % 1800 == 0
    gone = ok_json("periodic", "delete", "hourly", "--yes", server=target)
    assert gone == {"name": "hourly", "deleted": True}
    failure = fails(stubs.admin.GetPeriodic, ppb.GetPeriodicRequest(name="hourly"), timeout=10)
    assert (failure.code, failure.reason) == (grpc.StatusCode.NOT_FOUND, "PERIODIC_NOT_FOUND")


def test_the_periodic_page_lists_each_schedule_with_its_runs_and_actions(srv: ServerProcess) -> None:
    with httpx.Client(base_url=srv.http_url, timeout=20) as web:
        page = web.get("/periodic")
        assert page.status_code == 200
        html = page.text
        row = html[html.index('data-schedule="nightly-report"'):]
        row = row[:row.index("</tr>")]
        assert "<code>0 3 * * *</code>" in row and "Europe/Berlin" in row and 'href="/queues/reports"' in row
        assert len(re.findall(r"<time datetime=", row.split('class="next-runs"')[1].split("</td>")[0])) == 3
        for action in ("pause", "trigger", "delete"):
            assert f'action="/periodic/nightly-report/{action}"' in row
        token = re.search(r'name="csrf_token" value="([^"]+)"', html)
        assert token is not None
        fired = web.post("/periodic/nightly-report/trigger", data={"csrf_token": token[1]})
        assert fired.status_code == 303 and fired.headers["location"].startswith("/jobs/")
        job_id = fired.headers["location"].removeprefix("/jobs/")
        after = web.get("/periodic").text
        assert f'href="/jobs/{job_id}"' in after  # the last job, linked
        assert 'href="/periodic"' in web.get("/").text  # in the main navigation
        stale = web.post("/periodic/nightly-report/delete", data={"csrf_token": "forged"})
        assert stale.status_code == 403


def test_the_periodic_page_pages_50_schedules_at_a_time_like_the_job_lists(srv: ServerProcess,
                                                                          stubs: AdminStubs) -> None:
    """``?page=<token>`` with "Next page »" / "« First page" in the
    ``pager`` nav, as the queue page and the dead letters page their jobs."""
    names = [f"paged-{i:03d}" for i in range(55)]
    for name in names:
        stubs.call("DeclarePeriodic", ppb.DeclarePeriodicRequest(
            schedule=ppb.PeriodicSchedule(name=name, every="1h", queue="q", job_type="t")))
    try:
        every = sorted(p.schedule.name for p in stubs.call("ListPeriodic", ppb.ListPeriodicRequest()).schedules)
        with httpx.Client(base_url=srv.http_url, timeout=20) as web:
            seen: list[list[str]] = []
            url: str | None = "/periodic"
            pages: list[str] = []
            while url is not None:
                html = web.get(url).text
                pages.append(html)
                seen.append(re.findall(r'data-schedule="([^"]+)"', html))
                nxt = re.search(r'<a href="(/periodic\?page=[^"]+)" rel="next">Next page »</a>', html)
                url = nxt[1].replace("&amp;", "&") if nxt else None
            assert [len(p) for p in seen] == [50, len(every) - 50]
            assert [n for p in seen for n in p] == every  # by name, each once
            assert "« First page" not in pages[0] and '<a href="/periodic">« First page</a>' in pages[1]
            token = re.search(r'hx-get="/ui/partials/periodic\?page=([^"]+)"', pages[1])
            assert token is not None, "the polled partial keeps the page"
            partial = web.get(f"/ui/partials/periodic?page={token[1]}").text
            assert re.findall(r'data-schedule="([^"]+)"', partial) == seen[1]
            csrf = re.search(r'name="csrf_token" value="([^"]+)"', pages[1])
            assert csrf is not None
            back = web.post(f"/periodic/{seen[1][0]}/pause", data={"csrf_token": csrf[1], "page": every[49]})
            assert back.status_code == 303 and back.headers["location"] == f"/periodic?page={every[49]}"
            assert 'name="page"' in pages[1] and 'name="page"' not in pages[0]  # the forms say where they were
    finally:
        for name in names:
            stubs.call("DeletePeriodic", ppb.DeletePeriodicRequest(name=name))


@pytest.mark.parametrize("log_format", ["text", "json"])
def test_every_admin_change_of_a_schedule_is_logged(server_factory: ServerFactory, log_format: str) -> None:
    """Declare, change, pause, resume, trigger and delete by the admin API (or
    the UI: the same ``PeriodicAdmin`` calls) each write one ``sepp.periodic`` info line, as a
    queue's changes write ``sepp.queues`` lines (docs/operations.md "Events")."""
    server = server_factory(log_format=log_format)
    schedule = ppb.PeriodicSchedule(name="logged", cron="0 3 * * *", timezone="Europe/Berlin", queue="q",
                                    job_type="t", payload=b'{"secret": "PAYLOAD-7c1e"}')
    with connect(server.grpc_target) as stubs:
        stubs.call("DeclarePeriodic", ppb.DeclarePeriodicRequest(schedule=schedule))
        schedule.cron, schedule.every = "", "15m"
        stubs.call("DeclarePeriodic", ppb.DeclarePeriodicRequest(schedule=schedule))
        stubs.call("PausePeriodic", ppb.PausePeriodicRequest(name="logged"))
        stubs.call("ResumePeriodic", ppb.ResumePeriodicRequest(name="logged"))
        job_id = stubs.call("TriggerPeriodic", ppb.TriggerPeriodicRequest(name="logged")).job_id
        stubs.call("DeletePeriodic", ppb.DeletePeriodicRequest(name="logged"))
    wanted = 6

    def lines() -> list[str]:
        return [line for line in server.output if "periodic schedule 'logged'" in line]

    wait_for(lambda: len(lines()) >= wanted, 10, what="six periodic admin lines")
    got = lines()
    assert "PAYLOAD-7c1e" not in "\n".join(server.output)
    if log_format == "text":
        said = [line.split(" sepp.periodic ", 1)[1] for line in got]
        assert all(" INFO sepp.periodic [" in line for line in got), got
        assert [s.split("]: ", 1)[1] for s in said] == [
            "periodic schedule 'logged' declared: cron '0 3 * * *' (Europe/Berlin), queue 'q', job type 't' (admin)",
            "periodic schedule 'logged' changed: cron, every (admin)",
            "periodic schedule 'logged' paused (admin)",
            "periodic schedule 'logged' resumed (admin)",
            f"periodic schedule 'logged' triggered: job {job_id} of queue 'q' (admin)",
            "periodic schedule 'logged' deleted (admin)"]
        return
    entries = [json.loads(line) for line in got]
    assert all((e["logger"], e["level"], e["schedule"], e["source"]) == ("sepp.periodic", "info", "logged", "admin")
               for e in entries), entries
    assert [e["event"] for e in entries] == ["periodic_declared", "periodic_changed", "periodic_paused",
                                             "periodic_resumed", "periodic_triggered", "periodic_deleted"]
    assert (entries[0]["queue"], entries[0]["job_type"]) == ("q", "t")
    assert entries[1]["settings"] == ["cron", "every"]
    assert (entries[4]["job_id"], entries[4]["queue"], entries[4]["deduplicated"]) == (job_id, "q", False)
