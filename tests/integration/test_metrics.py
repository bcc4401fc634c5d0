"""``/metrics``: every metric moves when its event happens, on each
backend. A test scrapes before and after its event (parsed with prometheus_client's own
parser) and compares; each works on a queue of its own on one module-scoped server whose
queue gauges are read at every scrape (``metrics_gauge_interval = 0``), so they are exact.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import time
import urllib.request
from collections.abc import Iterator

import asyncpg
import grpc
import pytest
from prometheus_client.parser import text_string_to_metric_families
from support.backends import PG_TEST_DSN
from support.producer import job
from support.servers import ServerFactory, module_server
from support.waiting import wait_for, with_lead
from support.worker import fast_queue, wire_for

from sepp.api.v1 import producer_pb2 as ppb
from sepp.api.v1 import producer_pb2_grpc
from sepp.api.v1 import worker_pb2 as wpb
from sepp.testing import ServerProcess

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]

#: Every state's label, in the order the gauge lists them.
STATES = ("scheduled", "ready", "reserved", "completed", "dead_lettered", "cancelled")


@pytest.fixture(scope="module")
def metered(tmp_path_factory: pytest.TempPathFactory, backend: str) -> Iterator[ServerProcess]:
    """One server for the module: gauges read at every scrape, jitter-free fast retries."""
    yield from module_server(tmp_path_factory, backend, metrics_gauge_interval=0.0,
                             queue_defaults=fast_queue(lease_duration=30.0))


def scrape_once(server: ServerProcess) -> Samples:
    """Every sample of one ``GET /metrics``: {(sample name, labels): value}."""
    with urllib.request.urlopen(server.http_url + "/metrics", timeout=10) as resp:
        text = resp.read().decode()
    return {(s.name, frozenset(s.labels.items())): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def scrape(server: ServerProcess) -> Samples:
    """``scrape_once`` until one carries the queue gauges: on a loaded machine a store read
    may overrun the 1 s a scrape waits for it, and that scrape leaves them out (the
    behaviour ``test_a_scrape_answers_without_the_queue_gauges_while_storage_hangs`` checks)."""
    def with_gauges() -> Samples | None:
        samples = scrape_once(server)
        # The age sample comes with the two gauges (their families may have no sample yet).
        return samples if ("sepp_queue_gauges_age_seconds", frozenset()) in samples else None

    return wait_for(with_gauges, timeout=20, what="a scrape with the queue gauges")


def val(samples: Samples, name: str, **labels: str) -> float:
    """One sample's value (0 when the series does not exist yet)."""
    return samples.get((name, frozenset(labels.items())), 0.0)


def moved(before: Samples, after: Samples, name: str, **labels: str) -> float:
    """How much a sample grew between two scrapes."""
    return val(after, name, **labels) - val(before, name, **labels)


def test_an_enqueue_counts_and_shows_in_the_queue_gauges(metered: ServerProcess, fresh_queue: str) -> None:
    before = scrape(metered)
    with wire_for(metered, fresh_queue) as w:
        w.enqueue()
        w.enqueue()
    after = scrape(metered)
    assert moved(before, after, "sepp_jobs_enqueued_total", queue=fresh_queue) == 2
    # Every state of the queue is listed, 0 included.
    assert {state: val(after, "sepp_queue_jobs", queue=fresh_queue, state=state) for state in STATES} == {
        "scheduled": 0, "ready": 2, "reserved": 0, "completed": 0, "dead_lettered": 0, "cancelled": 0}
    assert val(after, "sepp_queue_paused", queue=fresh_queue) == 0
    assert val(after, "sepp_queue_no_consumer", queue=fresh_queue) == 0   # just enqueued: not yet
    assert (("sepp_queue_oldest_ready_age_seconds", frozenset({("queue", fresh_queue)})) in after)
    # The commit histograms saw the two commits (or one: they may share it).
    assert moved(before, after, "sepp_commit_batch_jobs_count") >= 1
    assert moved(before, after, "sepp_commit_batch_jobs_sum") >= 2
    assert moved(before, after, "sepp_commit_duration_seconds_count") >= 1
    assert moved(before, after, "sepp_commit_duration_seconds_sum") > 0
    assert moved(before, after, "sepp_rpc_duration_seconds_count", method="Enqueue", code="OK") == 2
    assert moved(before, after, "sepp_rpc_duration_seconds_bucket", method="Enqueue", code="OK", le="+Inf") == 2


def test_the_oldest_ready_age_grows_while_the_job_waits(metered: ServerProcess, fresh_queue: str) -> None:
    with wire_for(metered, fresh_queue) as w:
        w.enqueue()
    time.sleep(0.3)  # the subject: the age must have grown by this wait
    age = val(scrape(metered), "sepp_queue_oldest_ready_age_seconds", queue=fresh_queue)
    assert 0.3 <= age < 30


def test_a_duplicate_key_counts_as_deduplicated_not_enqueued(metered: ServerProcess, fresh_queue: str) -> None:
    with wire_for(metered, fresh_queue) as w:
        w.enqueue(idempotency_key="k")
        before = scrape(metered)
        w.enqueue(idempotency_key="k")
    after = scrape(metered)
    assert moved(before, after, "sepp_jobs_deduplicated_total", queue=fresh_queue) == 1
    assert moved(before, after, "sepp_jobs_enqueued_total", queue=fresh_queue) == 0
    assert val(after, "sepp_queue_jobs", queue=fresh_queue, state="ready") == 1


def test_rejections_count_by_code_and_rpc_by_status(metered: ServerProcess, fresh_queue: str) -> None:
    with wire_for(metered, fresh_queue) as w:
        w.enqueue()  # the queue exists now
        before = scrape(metered)
        with pytest.raises(grpc.RpcError) as err:
            w.enqueue(job_type="")
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        # In a batch, each rejected job counts; a queue the server does not know is labelled "".
        resp = w.producer.EnqueueBatch(ppb.EnqueueBatchRequest(jobs=[
            job(fresh_queue, ""), job("no such queue!"), job(fresh_queue)]), timeout=10)
        assert [r.WhichOneof("outcome") for r in resp.results] == ["rejection", "rejection", "ack"]
    after = scrape(metered)
    assert moved(before, after, "sepp_enqueue_rejections_total", queue=fresh_queue, code="JOB_TYPE_INVALID") == 2
    assert moved(before, after, "sepp_enqueue_rejections_total", queue="", code="QUEUE_NAME_INVALID") == 1
    assert moved(before, after, "sepp_jobs_enqueued_total", queue=fresh_queue) == 1
    assert moved(before, after, "sepp_rpc_duration_seconds_count", method="Enqueue", code="INVALID_ARGUMENT") == 1
    assert moved(before, after, "sepp_rpc_duration_seconds_count", method="EnqueueBatch", code="OK") == 1


def test_ack_retry_and_dead_letter_count_with_their_runtime(metered: ServerProcess, fresh_queue: str) -> None:
    last_chance = f"{fresh_queue}-1"
    with wire_for(metered, fresh_queue) as w:
        for _ in range(3):
            w.enqueue()
        w.enqueue(last_chance, max_attempts=1)
        before = scrape(metered)
        first, second, third = w.reserve(max_jobs=3)
        time.sleep(0.05)
        w.ack(first)
        w.nack(second, "retry")
        w.nack(third, "dead_letter", reason="BAD")
        w.nack(w.reserve_one([last_chance]), "retry")  # its only attempt: ATTEMPTS_EXHAUSTED
        w.ack(first)  # a repeated ack succeeds again: not counted twice
        with pytest.raises(grpc.RpcError) as err:
            w.ack((first.job.id, "00000000-0000-0000-0000-000000000000"))
        assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    after = scrape(metered)
    assert moved(before, after, "sepp_jobs_completed_total", queue=fresh_queue) == 1
    assert moved(before, after, "sepp_jobs_retried_total", queue=fresh_queue) == 1
    assert moved(before, after, "sepp_jobs_dead_lettered_total", queue=fresh_queue, reason="nack_dead_letter") == 1
    assert moved(before, after, "sepp_jobs_dead_lettered_total", queue=last_chance, reason="attempts_exhausted") == 1
    assert moved(before, after, "sepp_jobs_retried_total", queue=last_chance) == 0
    # One runtime observation per settled attempt: an ack and two nacks here, one nack there.
    assert moved(before, after, "sepp_job_runtime_seconds_count", queue=fresh_queue) == 3
    assert moved(before, after, "sepp_job_runtime_seconds_count", queue=last_chance) == 1
    assert moved(before, after, "sepp_job_runtime_seconds_sum", queue=fresh_queue) >= 0.15
    assert val(after, "sepp_job_runtime_seconds_bucket", queue=fresh_queue, le="0.005") == 0
    assert val(after, "sepp_queue_jobs", queue=fresh_queue, state="completed") == 1
    assert val(after, "sepp_queue_jobs", queue=fresh_queue, state="dead_lettered") == 1
    assert val(after, "sepp_queue_jobs", queue=last_chance, state="dead_lettered") == 1
    assert moved(before, after, "sepp_rpc_duration_seconds_count", method="Ack", code="OK") == 2
    assert moved(before, after, "sepp_rpc_duration_seconds_count", method="Ack", code="FAILED_PRECONDITION") == 1
    assert moved(before, after, "sepp_rpc_duration_seconds_count", method="Nack", code="OK") == 3


def test_a_release_is_neither_a_retry_nor_a_runtime(metered: ServerProcess, fresh_queue: str) -> None:
    with wire_for(metered, fresh_queue) as w:
        w.enqueue()
        before = scrape(metered)
        w.nack(w.reserve_one(), "release")
    after = scrape(metered)
    assert moved(before, after, "sepp_jobs_retried_total", queue=fresh_queue) == 0
    assert moved(before, after, "sepp_job_runtime_seconds_count", queue=fresh_queue) == 0
    assert val(after, "sepp_queue_jobs", queue=fresh_queue, state="ready") == 1


def test_expired_leases_count_and_the_last_attempt_is_dead_lettered_lease_expired(
        metered: ServerProcess, fresh_queue: str) -> None:
    def trial(lease: float) -> tuple[str, Samples, Samples] | None:
        queue = f"{fresh_queue}-{lease:g}"
        with wire_for(metered, queue) as w:
            w.enqueue(max_attempts=1)
            w.enqueue(max_attempts=5)
            before = scrape(metered)
            sent = time.monotonic()
            leased = w.reserve(max_jobs=2, lease=lease)
            assert len(leased) == 2
            held = val(scrape(metered), "sepp_queue_jobs", queue=queue, state="reserved")
            if time.monotonic() - sent >= lease:
                return None  # the scrape may have come after the leases ran out: try a longer one
            assert held == 2

            def expired() -> Samples | None:
                now = scrape(metered)
                return now if moved(before, now, "sepp_leases_expired_total", queue=queue) >= 2 else None

            return queue, before, wait_for(expired, timeout=10 + lease, what="both leases expired")

    queue, before, after = with_lead(trial, 0.2, what="a Reserve and a scrape")
    assert moved(before, after, "sepp_leases_expired_total", queue=queue) == 2
    assert moved(before, after, "sepp_jobs_dead_lettered_total", queue=queue, reason="lease_expired") == 1
    # One scrape's counters are taken before its gauge read: both reclaims are in the gauges.
    assert val(after, "sepp_queue_jobs", queue=queue, state="dead_lettered") == 1
    assert val(after, "sepp_queue_jobs", queue=queue, state="reserved") == 0

    # The job with attempts left waits out its backoff (retry_base 0.05 s) SCHEDULED, then the
    # sweep makes it READY again: the gauges follow it there.
    def back() -> Samples | None:
        now = scrape(metered)
        return now if val(now, "sepp_queue_jobs", queue=queue, state="ready") == 1 else None

    ready = wait_for(back, timeout=10, what="the expired job READY again after its backoff")
    assert val(ready, "sepp_queue_jobs", queue=queue, state="scheduled") == 0
    assert val(ready, "sepp_queue_jobs", queue=queue, state="dead_lettered") == 1


def test_a_scheduled_job_promoted_by_the_sweep_records_its_lag(metered: ServerProcess, fresh_queue: str) -> None:
    def trial(lead: float) -> tuple[Samples, Samples] | None:
        queue = f"{fresh_queue}-{lead:g}"
        with wire_for(metered, queue) as w:
            before = scrape(metered)
            due = dt.datetime.now(dt.UTC) + dt.timedelta(seconds=lead)
            w.enqueue(scheduled_at=due)
            waiting = val(scrape(metered), "sepp_queue_jobs", queue=queue, state="scheduled")
            if dt.datetime.now(dt.UTC) >= due:
                return None  # the scrape may have come after the job's time: try a longer lead
            assert waiting == 1

            def promoted() -> Samples | None:
                now = scrape(metered)
                return now if val(now, "sepp_queue_jobs", queue=queue, state="ready") == 1 else None

            return before, wait_for(promoted, timeout=10 + lead, what="the scheduled job became READY")

    before, after = with_lead(trial, 0.3, what="an enqueue and a scrape")
    # Other tests' retries may be promoted too: at least this one, each with a small lag.
    grew = moved(before, after, "sepp_promotion_lag_seconds_count")
    assert grew >= 1
    assert 0 <= moved(before, after, "sepp_promotion_lag_seconds_sum") < 5 * grew


def test_pause_shows_in_the_paused_gauge(metered: ServerProcess, fresh_queue: str) -> None:
    with wire_for(metered, fresh_queue) as w:
        w.enqueue()
        w.pause(fresh_queue)
        assert val(scrape(metered), "sepp_queue_paused", queue=fresh_queue) == 1
        w.pause(fresh_queue, paused=False)
        assert val(scrape(metered), "sepp_queue_paused", queue=fresh_queue) == 0


def test_every_metric_of_the_issue_is_exposed_with_its_type(metered: ServerProcess) -> None:
    with urllib.request.urlopen(metered.http_url + "/metrics", timeout=10) as resp:
        types = {f.name: f.type for f in text_string_to_metric_families(resp.read().decode())}
    counters = ["sepp_jobs_enqueued", "sepp_jobs_deduplicated", "sepp_enqueue_rejections", "sepp_jobs_completed",
                "sepp_jobs_retried", "sepp_jobs_dead_lettered", "sepp_leases_expired", "sepp_jobs_overloaded",
                "sepp_auth_failures", "sepp_commits", "sepp_sweep_skipped", "sepp_scrape_errors"]
    gauges = ["sepp_queue_jobs", "sepp_queue_oldest_ready_age_seconds", "sepp_queue_paused",
              "sepp_queue_no_consumer", "sepp_commit_backlog_jobs", "sepp_queues"]
    histograms = ["sepp_commit_batch_jobs", "sepp_commit_duration_seconds", "sepp_rpc_duration_seconds",
                  "sepp_promotion_lag_seconds", "sepp_job_runtime_seconds"]
    assert {n: types.get(n) for n in counters + gauges + histograms} == {
        **dict.fromkeys(counters, "counter"), **dict.fromkeys(gauges, "gauge"),
        **dict.fromkeys(histograms, "histogram")}


async def test_overload_counts_the_shed_jobs_and_default_gauges_come_from_the_background_read(
        server_factory: ServerFactory) -> None:
    # The default metrics_gauge_interval: the first scrape waits for the first read.
    slow = server_factory(max_commit_backlog=1, debug_commit_delay=0.2)
    before = scrape(slow)
    assert ("sepp_queue_gauges_age_seconds", frozenset()) in before
    channels = [grpc.aio.insecure_channel(slow.grpc_target) for _ in range(8)]
    try:
        await asyncio.gather(*(c.channel_ready() for c in channels))
        calls = [producer_pb2_grpc.ProducerServiceStub(c).EnqueueBatch(
            ppb.EnqueueBatchRequest(jobs=[job("shed"), job("shed")]), timeout=10) for c in channels]
        out = await asyncio.gather(*calls, return_exceptions=True)
    finally:
        await asyncio.gather(*(c.close() for c in channels))
    shed = [r for r in out if isinstance(r, grpc.aio.AioRpcError)]
    assert shed and all(r.code() == grpc.StatusCode.RESOURCE_EXHAUSTED for r in shed)
    after = scrape(slow)
    assert moved(before, after, "sepp_jobs_overloaded_total") == 2 * len(shed)
    assert moved(before, after, "sepp_rpc_duration_seconds_count", method="EnqueueBatch",
                 code="RESOURCE_EXHAUSTED") == len(shed)
    assert moved(before, after, "sepp_jobs_enqueued_total", queue="shed") == 2 * (len(out) - len(shed))


@pytest.mark.postgres_only(reason="a hung SQLite read cannot be provoked from outside: WAL readers never wait")
async def test_a_scrape_answers_without_the_queue_gauges_while_storage_hangs(
        metered: ServerProcess, fresh_queue: str) -> None:
    with wire_for(metered, fresh_queue) as w:
        w.enqueue()
    schema = metered.config["postgres"]["schema"]
    conn = await asyncpg.connect(PG_TEST_DSN)
    try:
        before = await asyncio.to_thread(scrape, metered)
        async with conn.transaction():
            await conn.execute(f"LOCK TABLE {schema}.jobs IN ACCESS EXCLUSIVE MODE")
            started = time.monotonic()
            during = await asyncio.to_thread(scrape_once, metered)
            took = time.monotonic() - started
        assert took < 8.0  # the scrape waits 1 s for the read, not the read's 30 s timeout
        assert not any(name == "sepp_queue_jobs" for name, _ in during)
        assert ("sepp_queue_gauges_age_seconds", frozenset()) not in during
        assert moved(before, during, "sepp_scrape_errors_total", reason="timeout") == 1
        assert val(during, "sepp_queue_paused", queue=fresh_queue) == 0  # the rest is there
        after = await asyncio.to_thread(wait_for, lambda: (s := scrape(metered)) and
                                        val(s, "sepp_queue_jobs", queue=fresh_queue, state="ready") == 1 and s)
        assert after
    finally:
        await conn.close()


def test_settle_batches_count_every_item(metered: ServerProcess, fresh_queue: str) -> None:
    with wire_for(metered, fresh_queue) as w:
        for _ in range(3):
            w.enqueue()
        got = w.reserve(max_jobs=3)
        before = scrape(metered)
        results = w.settle([wpb.SettleItem(ack=wpb.AckRequest(job_id=r.job.id, lease_id=r.lease_id)) for r in got])
        assert len(results) == 3
    after = scrape(metered)
    assert moved(before, after, "sepp_jobs_completed_total", queue=fresh_queue) == 3
    assert moved(before, after, "sepp_job_runtime_seconds_count", queue=fresh_queue) == 3
