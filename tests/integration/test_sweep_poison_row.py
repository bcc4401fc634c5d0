"""Reproduction 3 of issue 14, through a real ``sepp serve``: one unprocessable row must not
stop lease reclaim for the whole server. The row is damaged in the database file while the
server is stopped (its attempt history is not JSON, so the reclaim of that lease fails),
which keeps working whatever the API refuses at its edge. The store-level cases (policy
overflow, pages full of poison rows, promotion, retention) are in tests/storage."""

from __future__ import annotations

import re
import sqlite3

import httpx
from worker_support import ServerFactory, job_row, wait_for, wire_for

from sepp.storage.sqlite.store import DB_FILE


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
                   timeout=6.0, what="the emails lease to be reclaimed")
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
        wait_for(lambda: skipped() > first, timeout=5.0, what="the next pass to skip it again")
        assert re.search(r'^sepp_sweep_skipped_total\{pass="promote"\} 0\.0$', web.get("/metrics").text, re.M)
    logged = [line for line in server.output if "reclaim pass skipped job" in line]
    assert logged and poison in logged[0] and "'archive'" in logged[0] and "malformed JSON" in logged[0]
    assert not any("maintenance pass failed" in line or "reclaim pass failed" in line for line in server.output)
    assert len(logged) == 1  # a row skipped every pass is logged once a minute, not every pass
