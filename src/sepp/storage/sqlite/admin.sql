-- Named queries of the SQLite admin operations (sepp.storage.sqlite.admin).
-- Times in µs UTC, ids 16-byte blobs. States are written as literals so SQLite can
-- use the partial indexes (a bound parameter cannot prove a partial index's WHERE).
-- Listing queries return the seqs of one page plus their sort key; job_summaries
-- then reads those rows without the payload bytes.

-- ------------------------------------------------------------------ listings

-- name: list_ready
-- One queue's READY jobs in reserve order after (priority, run_at, seq), same priority.
SELECT seq, priority, run_at FROM jobs
WHERE queue = CAST(:queue AS TEXT) AND state = 2 AND priority = :priority AND (run_at, seq) > (:run_at, :seq)
  AND (:job_type IS NULL OR job_type = :job_type)
ORDER BY run_at, seq LIMIT :limit;

-- name: list_ready_lower
-- One queue's READY jobs with a priority below :priority (10 = from the start), reserve order.
SELECT seq, priority, run_at FROM jobs
WHERE queue = CAST(:queue AS TEXT) AND state = 2 AND priority < :priority
  AND (:job_type IS NULL OR job_type = :job_type)
ORDER BY priority DESC, run_at, seq LIMIT :limit;

-- name: next_ready_queue
-- The queue names of the per-queue walks are handled as their stored bytes (a BLOB here,
-- CAST back to TEXT as a parameter), so a name that is not UTF-8 (a damaged row) is walked
-- past like any other instead of failing the listing or repeating.
SELECT CAST(queue AS BLOB) FROM jobs WHERE state = 2 AND queue > CAST(:queue AS TEXT) ORDER BY queue LIMIT 1;

-- name: list_finished
-- One queue's jobs in one finished state, newest first, after (finished_at, seq).
SELECT seq, finished_at FROM jobs
WHERE state >= 4 AND state = :state AND queue = CAST(:queue AS TEXT)
  AND finished_at >= :after AND finished_at < :before AND (finished_at, seq) < (:finished_at, :seq)
  AND (:job_type IS NULL OR job_type = :job_type)
  AND (:reason IS NULL OR substr(reason, 1, length(:reason)) = :reason)
ORDER BY finished_at DESC, seq DESC LIMIT :limit;

-- name: list_failed_errors
-- As list_finished for DEAD_LETTERED / CANCELLED (:state, 5 or 6) with the error search's
-- test: of the next :limit jobs of the walk, the ones whose last error message holds :folded
-- (A-Z lowered, as lower() lowers) as (seq, finished_at, 1, 0), then the last job examined
-- as (seq, finished_at, 0, how many were examined) — no row when none was. jobs_failed alone
-- (migration 0009, covering): one statement a round, only the matches cross to Python.
WITH w AS MATERIALIZED (
    SELECT seq, finished_at, coalesce(instr(lower(last_error), :folded) > 0, 0) AS hit
    FROM jobs INDEXED BY jobs_failed
    WHERE state >= 5 AND state = :state AND queue = CAST(:queue AS TEXT)
      AND finished_at >= :after AND finished_at < :before AND (finished_at, seq) < (:finished_at, :seq)
    ORDER BY finished_at DESC, seq DESC LIMIT :limit)
SELECT seq, finished_at, 1, 0 FROM w WHERE hit
UNION ALL
SELECT * FROM (SELECT seq, finished_at, 0, (SELECT count(*) FROM w) FROM w ORDER BY finished_at, seq LIMIT 1);

-- name: next_finished_queue
SELECT CAST(queue AS BLOB) FROM jobs WHERE state >= 4 AND state = :state AND queue > CAST(:queue AS TEXT)
ORDER BY queue LIMIT 1;

-- name: list_scheduled
SELECT seq, run_at FROM jobs INDEXED BY jobs_scheduled
WHERE state = 1 AND (run_at, seq) > (:run_at, :seq)
  AND (:queue IS NULL OR queue = :queue) AND (:job_type IS NULL OR job_type = :job_type)
ORDER BY run_at, seq LIMIT :limit;

-- name: list_retrying
-- SCHEDULED jobs waiting for a retry (attempt > 0), in run order (jobs_retrying, migration 0011).
SELECT seq, run_at FROM jobs INDEXED BY jobs_retrying
WHERE state = 1 AND attempt > 0 AND (run_at, seq) > (:run_at, :seq)
  AND (:queue IS NULL OR queue = :queue) AND (:job_type IS NULL OR job_type = :job_type)
ORDER BY run_at, seq LIMIT :limit;

-- name: list_reserved
SELECT seq FROM jobs INDEXED BY jobs_leased
WHERE state = 3 AND seq > :seq
  AND (:queue IS NULL OR queue = :queue) AND (:job_type IS NULL OR job_type = :job_type)
ORDER BY seq LIMIT :limit;

-- name: list_any
-- Every state, enqueue order (a table scan filtered by queue/type; no state given).
SELECT seq FROM jobs
WHERE seq > :seq
  AND (:queue IS NULL OR queue = :queue) AND (:job_type IS NULL OR job_type = :job_type)
  AND (:reason IS NULL OR substr(reason, 1, length(:reason)) = :reason)
  AND (:after IS NULL OR finished_at >= :after) AND (:before IS NULL OR finished_at < :before)
ORDER BY seq LIMIT :limit;

-- ------------------------------------------------------------------ search
-- The drivers hand over candidate seqs in enqueue order after :seq; search_match keeps the
-- candidates that pass every filter (sepp.storage.search). :seqs and :custom are JSON
-- arrays (the seqs; [key, value] pairs), :terms the number of pairs.

-- name: search_by_custom
SELECT seq FROM job_custom WHERE key = :key AND value = :value AND seq > :seq ORDER BY seq LIMIT :limit;

-- name: search_by_id
SELECT seq FROM jobs WHERE id = :id AND seq > :seq;

-- name: search_by_key_in_queue
SELECT j.seq FROM idempotency i JOIN jobs j ON j.id = i.job_id
WHERE i.queue = :queue AND i.key = :key AND j.seq > :seq;

-- name: search_by_key
-- A key in every queue: one primary-key probe of idempotency per queue holding keys, the
-- queues found by a skip scan of that same key (each next queue one seek), never a scan.
WITH RECURSIVE qs(q) AS (
    SELECT (SELECT min(queue) FROM idempotency)
    UNION ALL
    SELECT (SELECT min(queue) FROM idempotency WHERE queue > qs.q) FROM qs WHERE qs.q IS NOT NULL
)
SELECT j.seq FROM qs CROSS JOIN idempotency i CROSS JOIN jobs j
WHERE qs.q IS NOT NULL AND i.queue = qs.q AND i.key = :key AND j.id = i.job_id AND j.seq > :seq
ORDER BY j.seq LIMIT :limit;

-- name: search_filters
-- The conditions of search_match / search_range (a fragment: admin.py puts a head on it).
(:queue IS NULL OR queue = :queue) AND (:state IS NULL OR state = :state)
  AND (:job_type IS NULL OR job_type = :job_type)
  AND (:reason IS NULL OR substr(reason, 1, length(:reason)) = :reason)
  AND (:after IS NULL OR finished_at >= :after) AND (:before IS NULL OR finished_at < :before)
  AND (:needle IS NULL OR (state <> 4 AND typeof(history) = 'text' AND instr(lower(history), :needle) > 0))
  AND (:terms = 0 OR :terms = (
      SELECT count(*) FROM json_each(:custom) AS t
      WHERE EXISTS (SELECT 1 FROM job_custom c
                    WHERE c.seq = jobs.seq AND c.key = t.value ->> 0 AND c.value = t.value ->> 1)))

-- name: search_match
-- The candidates :seqs (a JSON array) that pass: rowid lookups.
SELECT seq FROM jobs WHERE seq IN (SELECT value FROM json_each(:seqs)) AND {filters}

-- name: search_range
-- The jobs with :low < seq <= :high that pass, in enqueue order: a range of the table.
SELECT seq FROM jobs WHERE seq > :low AND seq <= :high AND {filters} ORDER BY seq

-- name: seq_bounds
SELECT (SELECT min(seq) FROM jobs), (SELECT max(seq) FROM jobs);

-- name: job_summaries
SELECT seq, id, queue, job_type, state, priority, run_at, enqueued_at, attempt, max_attempts,
    length(payload) AS size, encoding, extras, idempotency_key, lease_id, lease_expires_at, worker_id, started_at,
    finished_at, reason, cancel_requested,
    -- attempts recorded: a completed job's last attempt is implicit (not in history)
    json_array_length(h) + (state = 4 AND coalesce(json_extract(h, '$[#-1].outcome'), '') <> 'completed')
        AS recorded,
    CASE WHEN state = 4 THEN '' ELSE json_extract(h, '$[#-1].error_message') END AS last_error,
    node
FROM (SELECT *,
    -- a history that is not a JSON array (a damaged row) reads as none: the listing of the
    -- other rows must not fail with it
    CASE WHEN typeof(history) = 'text' AND json_valid(history) AND json_type(history) = 'array'
        THEN history ELSE '[]' END AS h
    FROM jobs WHERE seq IN (SELECT value FROM json_each(:seqs)));

-- ------------------------------------------------------------------ stats

-- name: count_ready_all
SELECT queue, count(*) FROM jobs WHERE state = 2 GROUP BY queue;

-- name: count_scheduled_all
SELECT queue, count(*) FROM jobs INDEXED BY jobs_scheduled WHERE state = 1 GROUP BY queue;

-- name: count_reserved_all
SELECT queue, count(*) FROM jobs INDEXED BY jobs_leased WHERE state = 3 GROUP BY queue;

-- name: count_reserved_by_worker
SELECT worker_id, count(*) FROM jobs INDEXED BY jobs_leased WHERE state = 3 GROUP BY worker_id;

-- name: count_finished_all
SELECT queue, state, count(*) FROM jobs WHERE state >= 4 GROUP BY state, queue;

-- name: count_queue
-- One queue: READY and finished states through their indexes; SCHEDULED/RESERVED are small sets.
SELECT
    (SELECT count(*) FROM jobs INDEXED BY jobs_scheduled WHERE state = 1 AND queue = :queue),
    (SELECT count(*) FROM jobs WHERE queue = :queue AND state = 2),
    (SELECT count(*) FROM jobs INDEXED BY jobs_leased WHERE state = 3 AND queue = :queue),
    (SELECT count(*) FROM jobs WHERE state >= 4 AND state = 4 AND queue = :queue),
    (SELECT count(*) FROM jobs WHERE state >= 4 AND state = 5 AND queue = :queue),
    (SELECT count(*) FROM jobs WHERE state >= 4 AND state = 6 AND queue = :queue),
    (SELECT count(*) FROM jobs INDEXED BY jobs_deferred WHERE state = 7 AND queue = :queue);

-- name: oldest_ready
-- min(run_at) of a queue's READY jobs: one index seek per priority (the index is ordered
-- by priority first, so a plain min() would scan every ready job of the queue).
SELECT min(first) FROM (
    SELECT (SELECT run_at FROM jobs WHERE queue = :queue AND state = 2 AND priority = p.value
            ORDER BY run_at LIMIT 1) AS first
    FROM json_each('[0,1,2,3,4,5,6,7,8,9]') AS p);

-- name: oldest_ready_all
-- oldest_ready for every queue at once (NULL for a queue without READY jobs).
-- :names is a JSON array of queue names.
SELECT q.value, (SELECT min(first) FROM (
    SELECT (SELECT run_at FROM jobs WHERE queue = q.value AND state = 2 AND priority = p.value
            ORDER BY run_at LIMIT 1) AS first
    FROM json_each('[0,1,2,3,4,5,6,7,8,9]') AS p))
FROM json_each(:names) AS q;

-- name: throughput_since
SELECT queue, minute, enqueued, completed, dead_lettered FROM queue_throughput WHERE minute >= :minute;

-- name: add_counts
INSERT INTO queue_throughput (queue, minute, enqueued, completed, dead_lettered) VALUES (?, ?, ?, ?, ?)
ON CONFLICT (queue, minute) DO UPDATE SET enqueued = enqueued + excluded.enqueued,
    completed = completed + excluded.completed, dead_lettered = dead_lettered + excluded.dead_lettered;

-- name: prune_throughput
DELETE FROM queue_throughput WHERE minute < ?;

-- ------------------------------------------------------------------ single-job writes

-- name: find_key
SELECT job_id, expires_at FROM idempotency WHERE queue = ? AND key = ?;

-- name: admin_lookup
SELECT seq, queue, state FROM jobs WHERE id = ?;

-- name: cancel_now
UPDATE jobs SET state = 6, finished_at = ?, purge_at = ?, reason = ? WHERE seq = ? AND state IN (1, 2, 7);

-- name: request_cancel
UPDATE jobs SET cancel_requested = 1 WHERE seq = ? AND state = 3;

-- name: requeue_one
-- Redrive (sepp.domain.transitions.redrive): ?1 state (READY), ?2 attempt (0),
-- ?3 run_at (now), ?4 seq; id, payload, extras, priority, max_attempts and history are
-- untouched. lease_id stays, so a stale worker's re-ack is LEASE_EXPIRED.
-- A job that still waits for dependencies (deps_left, docs/workflows.md) goes back to DEFERRED.
UPDATE jobs SET state = CASE WHEN deps_left > 0 THEN 7 ELSE ?1 END, attempt = ?2, run_at = ?3, finished_at = NULL,
    purge_at = NULL, reason = NULL, cancel_requested = 0, dep_failed_by = NULL
WHERE seq = ?4 AND state IN (5, 6);

-- name: delete_one
DELETE FROM jobs WHERE seq = ?;

-- ------------------------------------------------------------------ bulk

-- name: count_dead_queue
SELECT count(*) FROM jobs
WHERE state >= 4 AND state = 5 AND queue = :queue AND finished_at >= :after AND finished_at < :before
  AND (:job_type IS NULL OR job_type = :job_type)
  AND (:reason IS NULL OR substr(reason, 1, length(:reason)) = :reason);

-- name: count_dead_all
SELECT count(*) FROM jobs
WHERE state >= 4 AND state = 5 AND finished_at >= :after AND finished_at < :before
  AND (:job_type IS NULL OR job_type = :job_type)
  AND (:reason IS NULL OR substr(reason, 1, length(:reason)) = :reason);

-- name: requeue_dead_queue
UPDATE jobs SET state = 2, attempt = 0, run_at = :now, finished_at = NULL, purge_at = NULL, reason = NULL,
    cancel_requested = 0
WHERE seq IN (
    SELECT seq FROM jobs
    WHERE state >= 4 AND state = 5 AND queue = :queue AND finished_at >= :after AND finished_at < :before
      AND (:job_type IS NULL OR job_type = :job_type)
      AND (:reason IS NULL OR substr(reason, 1, length(:reason)) = :reason)
    ORDER BY finished_at, seq LIMIT :limit)
RETURNING id, queue, job_type, seq;

-- name: requeue_dead_all
UPDATE jobs SET state = 2, attempt = 0, run_at = :now, finished_at = NULL, purge_at = NULL, reason = NULL,
    cancel_requested = 0
WHERE seq IN (
    SELECT seq FROM jobs
    WHERE state >= 4 AND state = 5 AND finished_at >= :after AND finished_at < :before
      AND (:job_type IS NULL OR job_type = :job_type)
      AND (:reason IS NULL OR substr(reason, 1, length(:reason)) = :reason)
    LIMIT :limit)
RETURNING id, queue, job_type, seq;

-- name: purge_scheduled
DELETE FROM jobs WHERE seq IN (
    SELECT seq FROM jobs INDEXED BY jobs_scheduled WHERE state = 1 AND queue = :queue LIMIT :limit);

-- name: purge_ready
DELETE FROM jobs WHERE seq IN (SELECT seq FROM jobs WHERE queue = :queue AND state = 2 LIMIT :limit);

-- name: purge_reserved
DELETE FROM jobs WHERE seq IN (
    SELECT seq FROM jobs INDEXED BY jobs_leased WHERE state = 3 AND queue = :queue LIMIT :limit);

-- name: purge_finished
DELETE FROM jobs WHERE seq IN (
    SELECT seq FROM jobs WHERE state >= 4 AND state = :state AND queue = :queue LIMIT :limit);

-- name: queue_has_jobs
SELECT EXISTS (SELECT 1 FROM jobs INDEXED BY jobs_scheduled WHERE state = 1 AND queue = :queue)
    OR EXISTS (SELECT 1 FROM jobs WHERE queue = :queue AND state = 2)
    OR EXISTS (SELECT 1 FROM jobs INDEXED BY jobs_leased WHERE state = 3 AND queue = :queue)
    OR EXISTS (SELECT 1 FROM jobs WHERE state >= 4 AND state = 4 AND queue = :queue)
    OR EXISTS (SELECT 1 FROM jobs WHERE state >= 4 AND state = 5 AND queue = :queue)
    OR EXISTS (SELECT 1 FROM jobs WHERE state >= 4 AND state = 6 AND queue = :queue)
    OR EXISTS (SELECT 1 FROM jobs INDEXED BY jobs_deferred WHERE state = 7 AND queue = :queue);

-- name: delete_queue_row
DELETE FROM queues WHERE name = ?;

-- name: delete_queue_throughput
DELETE FROM queue_throughput WHERE queue = ?;

-- name: delete_queue_bucket
-- A deleted queue's token bucket: a queue made again under that name starts full,
-- not with the tokens the old one had left.
DELETE FROM flow_buckets WHERE queue = ?;

-- ------------------------------------------------------------------ held-back view

-- name: flow_bucket
-- The token bucket of queue :queue (tokens, updated_at), if any.
SELECT tokens, updated_at FROM flow_buckets WHERE queue = :queue;

-- name: flow_reserved_extras
-- The extras (custom map) of queue :queue's RESERVED jobs (jobs_leased).
SELECT extras FROM jobs WHERE queue = :queue AND state = 3;

-- name: flow_ready_keys
-- The first :limit READY jobs of queue :queue in reserve order with their extras (jobs_ready).
SELECT seq, extras FROM jobs WHERE queue = :queue AND state = 2 ORDER BY priority DESC, run_at, seq LIMIT :limit;

-- ------------------------------------------------------------------ dependencies (docs/workflows.md)
-- DEFERRED rows (state 7) sit in jobs_finished (WHERE state >= 4) with finished_at NULL, so
-- within a queue that index orders them by seq: enqueue order.

-- name: list_deferred
SELECT seq FROM jobs
WHERE state >= 4 AND state = 7 AND seq > :seq
  AND (:queue IS NULL OR queue = :queue) AND (:job_type IS NULL OR job_type = :job_type)
ORDER BY seq LIMIT :limit;

-- name: oldest_deferred_all
-- enqueued_at of the DEFERRED job of lowest seq of every queue of :names (a JSON array of
-- queue names; NULL for a queue without one): one index seek per queue.
SELECT q.value, (SELECT enqueued_at FROM jobs WHERE seq = (
    SELECT seq FROM jobs WHERE state >= 4 AND state = 7 AND queue = q.value ORDER BY finished_at, seq LIMIT 1))
FROM json_each(:names) AS q;

-- name: waiting_on
-- The ids of the dependencies job :seq still waits for (its job_waits edges), by their seq.
SELECT p.id FROM job_waits w JOIN jobs p ON p.seq = w.parent_seq WHERE w.child_seq = :seq ORDER BY w.parent_seq;
