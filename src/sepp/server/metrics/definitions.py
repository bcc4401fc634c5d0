"""Every metric ``/metrics`` shows, with its type, labels and help text, in one place
(docs/operations.md "## Metrics" explains each).

Counters count what happened on this node since it started (Prometheus sums them over the
nodes); the queue gauges describe the whole store (every node of a PostgreSQL cluster shows
the same values); histograms are this node's observations. Bucket bounds are here too.
"""

from __future__ import annotations

from dataclasses import dataclass

from sepp.storage.commit_stats import JOBS_BUCKETS, SECONDS_BUCKETS


@dataclass(frozen=True, slots=True)
class MetricDef:
    """One metric: ``name`` as exposed (a counter's ends in ``_total``), ``kind`` one of
    ``counter`` / ``gauge`` / ``histogram``, its label names, help text, and for a histogram
    its bucket upper bounds (+Inf added)."""

    name: str
    kind: str
    labels: tuple[str, ...]
    help: str
    buckets: tuple[float, ...] = ()

    @property
    def family(self) -> str:
        """The family name prometheus_client wants (a counter without ``_total``)."""
        return self.name.removesuffix("_total") if self.kind == "counter" else self.name


_NODE = " (this node, since it started)"

# ---------------------------------------------------------------------- counters (node-local)
JOBS_ENQUEUED = MetricDef("sepp_jobs_enqueued_total", "counter", ("queue",),
                          "Jobs stored by enqueue calls" + _NODE)
JOBS_ENQUEUED_SQL = MetricDef("sepp_jobs_enqueued_sql_total", "counter", ("queue",),
                              "Jobs stored through the SQL functions enqueue / enqueue_batch in the applications' "
                              "own transactions, as this node heard of them: every node hears every one, so each "
                              "node's count is the cluster's (aggregate nodes with max, not sum; docs/decisions.md)"
                              + _NODE)
JOBS_DEDUPLICATED = MetricDef("sepp_jobs_deduplicated_total", "counter", ("queue",),
                              "Enqueued jobs answered with an existing job of the same idempotency key" + _NODE)
ENQUEUE_REJECTIONS = MetricDef("sepp_enqueue_rejections_total", "counter", ("queue", "code"),
                               "Jobs rejected at enqueue, by rejection code; queue is empty when the "
                               "server does not know the queue named" + _NODE)
JOBS_COMPLETED = MetricDef("sepp_jobs_completed_total", "counter", ("queue",), "Jobs acked (COMPLETED)" + _NODE)
JOBS_RETRIED = MetricDef("sepp_jobs_retried_total", "counter", ("queue",),
                         "Nack retries that scheduled another attempt" + _NODE)
JOBS_DEAD_LETTERED = MetricDef("sepp_jobs_dead_lettered_total", "counter", ("queue", "reason"),
                               "Jobs dead-lettered, by reason: attempts_exhausted, nack_dead_letter, "
                               "lease_expired" + _NODE)
LEASES_EXPIRED = MetricDef("sepp_leases_expired_total", "counter", ("queue",),
                           "Leases that ran out and were reclaimed by this node's sweeper" + _NODE)
JOBS_OVERLOADED = MetricDef("sepp_jobs_overloaded_total", "counter", (),
                            "Valid jobs of enqueue calls refused with OVERLOADED (load shedding)" + _NODE)
AUTH_FAILURES = MetricDef("sepp_auth_failures_total", "counter", ("reason",),
                          "Calls refused by authentication or authorization, by reason" + _NODE)
SCRAPE_ERRORS = MetricDef("sepp_scrape_errors_total", "counter", ("reason",),
                          "Reads of the queue gauges that failed (error) or took too long (timeout)" + _NODE)
COMMITS = MetricDef("sepp_commits_total", "counter", (), "Write transactions committed" + _NODE)
SWEEP_SKIPPED = MetricDef("sepp_sweep_skipped_total", "counter", ("pass",),
                          "Rows a sweep pass could not process and skipped" + _NODE)

# ---------------------------------------------------------------------- gauges
COMMIT_BACKLOG = MetricDef("sepp_commit_backlog_jobs", "gauge", (), "Jobs waiting for the committer (this node)")
QUEUES = MetricDef("sepp_queues", "gauge", (), "Queues known to the server")
QUEUE_JOBS = MetricDef("sepp_queue_jobs", "gauge", ("queue", "state"),
                       "Jobs stored per queue and state (whole store, every node alike)")
QUEUE_OLDEST_READY_AGE = MetricDef("sepp_queue_oldest_ready_age_seconds", "gauge", ("queue",),
                                   "Seconds since the oldest READY job of the queue became ready; 0 with none "
                                   "(whole store)")
QUEUE_OLDEST_DEFERRED_AGE = MetricDef("sepp_queue_oldest_deferred_age_seconds", "gauge", ("queue",),
                                      "Seconds since the DEFERRED job enqueued first was enqueued (waiting for "
                                      "its dependencies); 0 with none (whole store)")
QUEUE_PAUSED = MetricDef("sepp_queue_paused", "gauge", ("queue",), "1 when the queue is paused, else 0")
QUEUE_NO_CONSUMER = MetricDef("sepp_queue_no_consumer", "gauge", ("queue",),
                              "1 when the queue is flagged no consumer (READY jobs, and no Reserve from any "
                              "worker within its consumer_timeout), else 0")
QUEUE_GAUGES_AGE = MetricDef("sepp_queue_gauges_age_seconds", "gauge", (),
                             "Age of the store read the sepp_queue_jobs and oldest-ready gauges show")

# ---------------------------------------------------------------------- histograms (node-local)
COMMIT_BATCH_JOBS = MetricDef("sepp_commit_batch_jobs", "histogram", (),
                              "Jobs per committed write transaction" + _NODE, JOBS_BUCKETS)
COMMIT_DURATION = MetricDef("sepp_commit_duration_seconds", "histogram", (),
                            "Wall time of the durable (fsync'd) commit of a write transaction" + _NODE,
                            SECONDS_BUCKETS)
RPC_DURATION = MetricDef("sepp_rpc_duration_seconds", "histogram", ("method", "code"),
                         "gRPC calls of sepp's services by method and status code, seconds" + _NODE,
                         (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
                          30.0, 60.0))
PROMOTION_LAG = MetricDef("sepp_promotion_lag_seconds", "histogram", (),
                          "Time from a scheduled job's run_at to a promotion (the sweep's or a Reserve's) "
                          "making it READY" + _NODE,
                          (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0))
JOB_RUNTIME = MetricDef("sepp_job_runtime_seconds", "histogram", ("queue",),
                        "Time from reserve to ack or nack of an attempt, seconds" + _NODE,
                        (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0,
                         600.0, 1800.0, 3600.0))

#: Every metric, in exposition order.
ALL: tuple[MetricDef, ...] = (
    JOBS_ENQUEUED, JOBS_ENQUEUED_SQL, JOBS_DEDUPLICATED, ENQUEUE_REJECTIONS, JOBS_COMPLETED, JOBS_RETRIED,
    JOBS_DEAD_LETTERED, LEASES_EXPIRED, JOBS_OVERLOADED, AUTH_FAILURES, SCRAPE_ERRORS, COMMITS, SWEEP_SKIPPED,
    COMMIT_BACKLOG, QUEUES, QUEUE_JOBS, QUEUE_OLDEST_READY_AGE, QUEUE_OLDEST_DEFERRED_AGE, QUEUE_PAUSED,
    QUEUE_NO_CONSUMER, QUEUE_GAUGES_AGE,
    COMMIT_BATCH_JOBS, COMMIT_DURATION, RPC_DURATION, PROMOTION_LAG, JOB_RUNTIME,
)

#: Dead-letter reasons of ``sepp_jobs_dead_lettered_total`` (exactly these).
ATTEMPTS_EXHAUSTED, NACK_DEAD_LETTER, LEASE_EXPIRED = "attempts_exhausted", "nack_dead_letter", "lease_expired"
