"""Through a real ``sepp serve``: one unprocessable row must not
stop lease reclaim for the whole server. The row is damaged in the database file while the
server is stopped (its attempt history is not JSON, so the reclaim of that lease fails),
which keeps working whatever the API refuses at its edge. The store-level cases (policy
overflow, pages full of poison rows, promotion, retention) are in tests/storage."""

from __future__ import annotations

import re
import sqlite3

import grpc
import httpx
import pytest
from support.servers import ServerFactory
from support.waiting import wait_for
from support.worker import job_row, wire_for

from sepp.api.v1 import admin_pb2 as apb
from sepp.api.v1 import admin_pb2_grpc
from sepp.api.v1 import common_pb2 as pb
from sepp.storage.sqlite.store import DB_FILE

pytestmark = pytest.mark.sqlite_only(reason="damages a row in the sepp.db file with sqlite3")


def test_a_poison_row_on_one_queue_does_not_stop_another_queues_lease_coming_back(
        server_factory: ServerFactory) -> None:
    server = server_factory(queues={"archive": {"default_max_attempts": 1}})
    with wire_for(server) as w:
        poison = w.enqueue("archive")
        w.reserve_one(["archive"], lease=1.0)  # expires first: sorts first in the reclaim pass
        mail = w.enqueue("emails")
        w.reserve_one(["emails"], lease=1.0)
    server.terminate()
    db = sqlite3.connect(server.data_dir / DB_FILE, isolation_level=None)
    db.execute("UPDATE jobs SET history = 'not json' WHERE queue = 'archive'")
    db.close()

    server.start()
    row = wait_for(lambda: (r := job_row(server, mail)) is not None and r.state == "READY" and r,
                   timeout=20.0, what="the emails lease to be reclaimed")
    assert row and row.history[-1]["outcome"] == "lease_expired"
    db = sqlite3.connect(f"file:{server.data_dir / DB_FILE}?mode=ro", uri=True)
    (state,) = db.execute("SELECT state FROM jobs WHERE queue = 'archive'").fetchone()
    db.close()
    assert state == 3  # still RESERVED: skipped, left as it was, tried again by later passes

    with httpx.Client(base_url=server.http_url) as web:
        def skipped() -> float:
            text = web.get("/metrics").text
            assert "# TYPE sepp_sweep_skipped_total counter" in text
            return float(re.search(r'^sepp_sweep_skipped_total\{pass="reclaim"\} (\S+)$', text, re.M)[1])  # type: ignore[index]

        first = skipped()
        assert first >= 1
        wait_for(lambda: skipped() > first, timeout=15.0, what="the next pass to skip it again")
        assert re.search(r'^sepp_sweep_skipped_total\{pass="promote"\} 0\.0$', web.get("/metrics").text, re.M)
    logged = [line for line in server.output if "reclaim pass skipped job" in line]
    assert logged and poison in logged[0] and "'archive'" in logged[0] and "malformed JSON" in logged[0]
    assert not any("maintenance pass failed" in line or "reclaim pass failed" in line for line in server.output)
    assert len(logged) == 1  # a row skipped every pass is logged once a minute, not every pass


def test_a_damaged_history_or_extras_does_not_fail_the_listing_of_the_other_jobs(
        server_factory: ServerFactory) -> None:
    """Nothing else may fail: ListJobs over every queue, the dead-letter page and
    the poison jobs' own GetJob / job page read a history that is not a JSON array (or has
    entries of the wrong shape and out-of-range times) and an extras blob that does not
    decode; before, one such row failed every listing that included it with INTERNAL."""
    server = server_factory()
    with wire_for(server) as w:
        bad = [w.enqueue("poison") for _ in range(4)]
        good = w.enqueue("emails")
    server.terminate()
    db = sqlite3.connect(server.data_dir / DB_FILE, isolation_level=None)
    damage = ["'not json'", "'{\"a\": 1}'", "'[1, {\"attempt\": \"x\", \"started_at\": 1e400, "
              "\"ended_at\": 99999999999999999999999}]'"]
    for job_id, history in zip(bad, damage, strict=False):
        db.execute(f"UPDATE jobs SET history = {history}, state = 5, finished_at = 1 WHERE id = ?",
                   (bytes.fromhex(job_id.replace("-", "")),))
    db.execute("UPDATE jobs SET extras = x'ffffffff0102' WHERE id = ?", (bytes.fromhex(bad[3].replace("-", "")),))
    db.close()
    server.start()
    with grpc.insecure_channel(server.grpc_target) as channel:
        admin = admin_pb2_grpc.AdminServiceStub(channel)
        listed = {s.job.id for s in admin.ListJobs(apb.ListJobsRequest(page_size=1000), timeout=10).jobs}
        assert {good, *bad} <= listed
        dead = admin.ListJobs(apb.ListJobsRequest(state=pb.DEAD_LETTERED, page_size=1000), timeout=10).jobs
        assert {s.job.id for s in dead} == set(bad[:3])
        for job_id in bad:
            job = admin.GetJob(apb.GetJobRequest(job_id=job_id), timeout=10)
            assert job.id == job_id
        shape = admin.GetJob(apb.GetJobRequest(job_id=bad[2]), timeout=10).attempts
        assert len(shape) == 1 and shape[0].attempt == 0 and not shape[0].HasField("ended_at")
    with httpx.Client(base_url=server.http_url, timeout=10) as web:
        assert web.get("/dead").status_code == 200
        for job_id in bad:
            assert web.get(f"/jobs/{job_id}").status_code == 200
    assert not any("Traceback" in line for line in server.output)
