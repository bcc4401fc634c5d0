"""Write screenshots of the admin web UI to docs/screenshots/ (the README's "What it looks like").

Usage: ``python scripts/ui_screenshots.py [--out docs/screenshots] [--chromium /usr/bin/chromium]``
(``scripts/ensure-chromium.sh`` installs Debian's Chromium; Playwright drives it, no browser
download).

It starts a real ``sepp serve`` on a temporary folder with four queues (one flow-limited:
``max_in_flight`` and ``rate_limit``) and two periodic schedules, produces traffic through
the gRPC API — jobs in every state, retries, dead letters with errors, a cancelled job,
workers reserving with their concurrency and version, some of them holding leases — and
captures 1280×800 PNGs of the dashboard, a queue (with its job-type figures), a job, the
workers, search results, a bulk requeue's dry run, the periodic schedules, dead letters,
nodes, the enqueue form and the dashboard on a phone. The throughput chart needs a day of
history, which a screenshot run does not have: the script seeds the ``queue_throughput``
table with a synthetic last 24 hours (demo data, clearly not a benchmark) before the
server starts.
"""

from __future__ import annotations

import argparse
import math
import random
import sqlite3
import sys
import tempfile
import time
from pathlib import Path
from urllib.parse import urlencode

import grpc
from google.protobuf import duration_pb2, timestamp_pb2

from sepp.api.v1 import admin_pb2 as apb
from sepp.api.v1 import admin_pb2_grpc, producer_pb2_grpc, worker_pb2_grpc
from sepp.api.v1 import common_pb2 as pb
from sepp.api.v1 import worker_pb2 as wpb
from sepp.testing import ServerProcess

ROOT = Path(__file__).resolve().parent.parent
CONFIG = {"sweep_interval": 0.2, "node_name": "node-a", "queues": {
    "emails": {"default_priority": 5},
    "billing:invoices": {"default_max_attempts": 3},
    "reports.daily": {"limits": {"max_payload_bytes": 65536}},
    "webhooks": {"max_in_flight": 3, "rate_limit": "20/s"},
}, "periodic": [
    {"name": "nightly-report", "cron": "0 3 * * *", "timezone": "Europe/Berlin", "queue": "reports.daily",
     "job_type": "build_report", "payload": '{"kind": "nightly"}'},
    {"name": "refresh-cache", "every": "15m", "queue": "emails", "job_type": "refresh_cache", "catch_up": "none"},
]}
VIEWPORT = {"width": 1280, "height": 800}
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def seed_history(db: Path) -> None:
    """A synthetic last 24 hours of throughput per queue (see the module docstring)."""
    rng = random.Random(4)
    now_minute = time.time_ns() // 1000 // 60_000_000
    rows = []
    for queue, base in (("emails", 420), ("billing:invoices", 90), ("reports.daily", 12), ("webhooks", 60)):
        for ago in range(1, 24 * 60):
            wave = (1 + 0.25 * math.sin(ago / 37)) * (1.3 + math.sin(ago / 229))
            enq = int(base * wave * rng.uniform(0.85, 1.15))
            done = int(enq * rng.uniform(0.9, 1.05))
            dead = rng.choice([0, 0, 0, 1, 2]) if queue != "reports.daily" else 0
            rows.append((queue, now_minute - ago, enq, done, dead))
    with sqlite3.connect(db) as conn:
        conn.executemany("INSERT INTO queue_throughput (queue, minute, enqueued, completed, dead_lettered) "
                         "VALUES (?, ?, ?, ?, ?)", rows)


def traffic(target: str) -> dict[str, str]:
    """Enqueue, complete and dead-letter some jobs; returns ids worth a screenshot."""
    ids: dict[str, str] = {}
    with grpc.insecure_channel(target) as ch:
        producer = producer_pb2_grpc.ProducerServiceStub(ch)
        worker = worker_pb2_grpc.WorkerServiceStub(ch)
        admin = admin_pb2_grpc.AdminServiceStub(ch)
        version = "sepp-python/0.1.0"

        def enqueue(queue: str, job_type: str, body: bytes, **kw: object) -> str:
            req = pb.EnqueueRequest(queue=queue, job_type=job_type,
                                    payload=pb.Payload(data=body, encoding="application/json"), **kw)  # type: ignore[arg-type]
            return str(producer.Enqueue(req).job_id)

        for i in range(40):
            enqueue("emails", "send_welcome", b'{"user_id": %d, "locale": "en-US"}' % (1000 + i),
                    custom={"user_id": pb.CustomValue(int_value=1000 + i)})
        for i in range(12):
            enqueue("billing:invoices", "charge_card", b'{"invoice": "INV-%04d", "amount_cents": %d}' % (i, 1999 + i),
                    priority=8)
        later = timestamp_pb2.Timestamp()
        later.FromNanoseconds(time.time_ns() + 3600 * 10**9)
        reports = [enqueue("reports.daily", "build_report", b'{"day": "2026-05-0%d"}' % (i + 1), scheduled_at=later)
                   for i in range(3)]
        # Complete most emails, in a few waves with run times of tens of ms (job-type figures).
        rng = random.Random(7)
        for wave in range(5):
            reserve = wpb.ReserveRequest(queues=["emails"], max_jobs=6, worker_id="web-1:4242", concurrency=8,
                                         client_version=version, host="web-1")
            for r in worker.Reserve(reserve).reservations:
                time.sleep(rng.uniform(0.005, 0.06 + 0.04 * wave))
                worker.Ack(wpb.AckRequest(job_id=r.job.id, lease_id=r.lease_id, worker_id="web-1:4242"))
        # One retried later (SCHEDULED), one dead-lettered without a handler.
        sms = enqueue("emails", "send_sms", b'{"user_id": 77, "text": "hi"}', priority=9)
        for r in worker.Reserve(wpb.ReserveRequest(queues=["emails"], max_jobs=2, worker_id="web-2:5151",
                                                   concurrency=4, client_version=version,
                                                   host="web-2")).reservations:
            if r.job.id == sms:
                worker.Nack(wpb.NackRequest(job_id=r.job.id, lease_id=r.lease_id, worker_id="web-2:5151",
                                            dead_letter="no handler registered for job type 'send_sms'"))
            else:
                worker.Nack(wpb.NackRequest(job_id=r.job.id, lease_id=r.lease_id, worker_id="web-2:5151",
                                            retry_after=duration_pb2.Duration(seconds=600),
                                            error=wpb.JobError(message="SMTP 451: try again later")))
        # web-2 holds a few emails (RESERVED, a long lease).
        worker.Reserve(wpb.ReserveRequest(queues=["emails"], max_jobs=3, worker_id="web-2:5151", concurrency=4,
                                          client_version=version, host="web-2",
                                          lease_duration=duration_pb2.Duration(seconds=1800)))
        # webhooks (max_in_flight 3, 20/s): four dead letters with a TLS error, then a worker at the limit.
        for i in range(24):
            enqueue("webhooks", "deliver", b'{"endpoint": "https://hooks.example.com/%d"}' % i,
                    custom={"tenant": pb.CustomValue(string_value=f"tenant-{i % 3}")})
        for i in range(6):
            (r,) = worker.Reserve(wpb.ReserveRequest(queues=["webhooks"], max_jobs=1, worker_id="hooks-1:901",
                                                     concurrency=3, client_version=version,
                                                     host="hooks-1")).reservations
            message = "TLS certificate expired for hooks.example.com" if i % 3 else "connection refused"
            worker.Nack(wpb.NackRequest(job_id=r.job.id, lease_id=r.lease_id, worker_id="hooks-1:901",
                                        dead_letter="endpoint unreachable", error=wpb.JobError(message=message)))
        worker.Reserve(wpb.ReserveRequest(queues=["webhooks"], max_jobs=10, worker_id="hooks-1:901", concurrency=3,
                                          client_version=version, host="hooks-1",
                                          lease_duration=duration_pb2.Duration(seconds=1800)))
        # Dead-letter two invoices, with a retry first.
        ids["job"] = enqueue("billing:invoices", "charge_card",
                              b'{"invoice": "INV-0042", "amount_cents": 4999, "customer": {"id": "cus_9", '
                              b'"country": "DE"}}', priority=9, max_attempts=2,
                              custom={"customer_id": pb.CustomValue(string_value="cus_9"),
                                      "amount_cents": pb.CustomValue(int_value=4999),
                                      "retryable": pb.CustomValue(bool_value=False),
                                      "fx_rate": pb.CustomValue(float_value=1.0831)},
                              idempotency_key="invoice-INV-0042",
                              trace_context={"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"})
        for attempt in (1, 2):
            (r,) = worker.Reserve(wpb.ReserveRequest(queues=["billing:invoices"], max_jobs=1,
                                                     worker_id=f"billing-{attempt}:77")).reservations
            time.sleep(0.05)
            worker.Nack(wpb.NackRequest(
                job_id=r.job.id, lease_id=r.lease_id, retry_after=duration_pb2.Duration(seconds=0),
                error=wpb.JobError(message="card_declined: insufficient funds" if attempt == 2 else
                                   "gateway timeout after 10s",
                                   detail="Traceback (most recent call last):\n  File \"billing.py\", line 88, in "
                                          "charge\n    raise PaymentError(code)\nPaymentError: card_declined")))
        admin.CancelJob(apb.CancelJobRequest(job_id=reports[2], reason="report no longer needed"))
    return ids


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "screenshots")
    parser.add_argument("--chromium", default="/usr/bin/chromium")
    args = parser.parse_args()
    from playwright.sync_api import sync_playwright

    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp) / "data"
        proc = ServerProcess(data, CONFIG).start()
        proc.terminate()
        seed_history(data / "sepp.db")
        proc.start()
        try:
            ids = traffic(proc.grpc_target)
            with sync_playwright() as pw:
                browser = pw.chromium.launch(executable_path=args.chromium, args=ARGS, headless=True)
                page = browser.new_page(viewport=VIEWPORT, device_scale_factor=1)
                search = "/search?" + urlencode({"q": 'error:"certificate expired"'})
                shots = [("dashboard", "/?window=24h"), ("queue", "/queues/emails"), ("job", f"/jobs/{ids['job']}"),
                         ("workers", "/workers"), ("search", search),
                         ("bulk-dry-run", "/queues/webhooks/bulk?action=requeue&state=dead-lettered"),
                         ("periodic", "/periodic"), ("dead-letters", "/dead"), ("nodes", "/nodes")]
                for name, path in shots:
                    page.goto(proc.http_url + path)
                    page.wait_for_load_state("networkidle")
                    # The queue and job pages are taller than a screen: their first 1,100 px.
                    tall = name in ("queue", "job")
                    page.screenshot(path=str(args.out / f"{name}.png"), full_page=tall,
                                    clip={"x": 0, "y": 0, "width": 1280, "height": 1100} if tall else None)
                page.goto(proc.http_url + "/enqueue?queue=emails")
                page.fill("#job_type", "send_welcome")
                page.fill("#payload", '{\n  "user_id": 42,\n  "locale": "en-US"\n}')
                page.fill("#ck1", "user_id")
                page.select_option("#ct1", "int")
                page.fill("#cv1", "42")
                page.select_option("#priority", "7")
                page.fill("#idempotency_key", "welcome-42")
                page.click("button[type=submit].primary")
                page.wait_for_selector("#ack-job-id")
                page.screenshot(path=str(args.out / "enqueue.png"))
                phone = browser.new_page(viewport={"width": 390, "height": 844}, device_scale_factor=2,
                                         is_mobile=True)
                phone.goto(proc.http_url + "/")
                phone.screenshot(path=str(args.out / "dashboard-phone.png"), full_page=False)
                browser.close()
        finally:
            proc.terminate()
    for png in sorted(args.out.glob("*.png")):
        print(png.relative_to(ROOT) if png.is_relative_to(ROOT) else png)
    return 0


if __name__ == "__main__":
    sys.exit(main())
