-- Named queries of the PostgreSQL admin operations (sepp.storage.postgres.admin), the
-- counterparts of sqlite/admin.sql with the same sort keys and filters.
-- Times in µs UTC (bigint), ids 16-byte bytea, states smallint. States are written as
-- literals where a partial index must be proved (jobs_ready: state = 2, jobs_scheduled:
-- state = 1, jobs_leased: state = 3, jobs_finished: state >= 4); a finished state given as a
-- parameter is paired with the literal "state >= 4" so a generic plan can still use
-- jobs_finished. Every parameter carries its type, so optional filters ("$n IS NULL OR …")
-- prepare without guessing. Priorities and page positions are compared as bigint, so a
-- malformed page position never overflows a parameter.
-- The state guard of a write on rows found by seq (one job, or the rows a chunk CTE chose)
-- is written `state::integer = N` so that no partial index is used to find them, and a
-- chunk's rows are found as `seq = ANY(ARRAY(SELECT seq FROM chunk))`: see the header of
-- queries.sql. The search filter's state (search_match, search_range: rows found by seq)
-- is `state::integer` for the same reason.
-- Writes that judge a row's state (cancel, requeue) lock it first (admin_lookup) and
-- keep the state guard in the UPDATE; bulk writes take their rows through
-- "FOR UPDATE SKIP LOCKED" subselects, so a row another node is reserving or settling is
-- left for a later chunk instead of being overwritten or waited on. Those subselects are
-- MATERIALIZED CTEs, never "WHERE seq IN (SELECT … LIMIT n)": PostgreSQL may run such an IN
-- subquery again while the outer statement proceeds (a nested-loop semi join), and each run
-- finds other rows, so more than n rows were written (seen: LIMIT 2 redrove 3).

-- ------------------------------------------------------------------ listings

-- name: list_ready
-- One queue's READY jobs in reserve order after (priority, run_at, seq), same priority.
-- $1 queue, $2 priority, $3 run_at, $4 seq, $5 job_type or NULL, $6 limit.
SELECT seq, priority, run_at FROM jobs
WHERE queue = $1::text AND state = 2 AND priority = $2::bigint AND (run_at, seq) > ($3::bigint, $4::bigint)
  AND ($5::text IS NULL OR job_type = $5::text)
ORDER BY run_at, seq LIMIT $6::bigint;

-- name: list_ready_lower
-- One queue's READY jobs with a priority below $2 (10 = from the start), reserve order.
-- $1 queue, $2 priority, $3 job_type or NULL, $4 limit.
SELECT seq, priority, run_at FROM jobs
WHERE queue = $1::text AND state = 2 AND priority < $2::bigint
  AND ($3::text IS NULL OR job_type = $3::text)
ORDER BY priority DESC, run_at, seq LIMIT $4::bigint;

-- name: next_ready_queue
-- The next queue name after $1 holding READY jobs (a skip through jobs_ready).
SELECT queue FROM jobs WHERE state = 2 AND queue > $1::text ORDER BY queue LIMIT 1;

-- name: list_finished
-- One queue's jobs in one finished state, newest first, after (finished_at, seq).
-- $1 state, $2 queue, $3 finished_after, $4 finished_before, $5 finished_at, $6 seq,
-- $7 job_type or NULL, $8 reason prefix or NULL, $9 limit.
SELECT seq, finished_at FROM jobs
WHERE state >= 4 AND state = $1::smallint AND queue = $2::text
  AND finished_at >= $3::bigint AND finished_at < $4::bigint AND (finished_at, seq) < ($5::bigint, $6::bigint)
  AND ($7::text IS NULL OR job_type = $7::text)
  AND ($8::text IS NULL OR starts_with(reason, $8::text))
ORDER BY finished_at DESC, seq DESC LIMIT $9::bigint;

-- name: next_finished_queue
-- $1 state, $2 the queue after which to look.
SELECT queue FROM jobs WHERE state >= 4 AND state = $1::smallint AND queue > $2::text
ORDER BY queue LIMIT 1;

-- name: list_scheduled
-- $1 run_at, $2 seq, $3 queue or NULL, $4 job_type or NULL, $5 limit.
SELECT seq, run_at FROM jobs
WHERE state = 1 AND (run_at, seq) > ($1::bigint, $2::bigint)
  AND ($3::text IS NULL OR queue = $3::text) AND ($4::text IS NULL OR job_type = $4::text)
ORDER BY run_at, seq LIMIT $5::bigint;

-- name: list_retrying
-- SCHEDULED jobs waiting for a retry (attempt > 0), in run order (jobs_retrying, migration 0011).
-- $1 run_at, $2 seq, $3 queue or NULL, $4 job_type or NULL, $5 limit.
SELECT seq, run_at FROM jobs
WHERE state = 1 AND attempt > 0 AND (run_at, seq) > ($1::bigint, $2::bigint)
  AND ($3::text IS NULL OR queue = $3::text) AND ($4::text IS NULL OR job_type = $4::text)
ORDER BY run_at, seq LIMIT $5::bigint;

-- name: list_reserved
-- $1 seq, $2 queue or NULL, $3 job_type or NULL, $4 limit.
SELECT seq FROM jobs
WHERE state = 3 AND seq > $1::bigint
  AND ($2::text IS NULL OR queue = $2::text) AND ($3::text IS NULL OR job_type = $3::text)
ORDER BY seq LIMIT $4::bigint;

-- name: list_any
-- Every state, enqueue order (the primary key filtered by queue/type; no state given).
-- $1 seq, $2 queue, $3 job_type, $4 reason prefix, $5 finished_after, $6 finished_before
-- (each NULL = any), $7 limit.
SELECT seq FROM jobs
WHERE seq > $1::bigint
  AND ($2::text IS NULL OR queue = $2::text) AND ($3::text IS NULL OR job_type = $3::text)
  AND ($4::text IS NULL OR starts_with(reason, $4::text))
  AND ($5::bigint IS NULL OR finished_at >= $5::bigint) AND ($6::bigint IS NULL OR finished_at < $6::bigint)
ORDER BY seq LIMIT $7::bigint;

-- ------------------------------------------------------------------ search
-- As sqlite/admin.sql: the drivers hand over candidate seqs in enqueue order after the
-- position; search_match keeps those that pass every filter (sepp.storage.search).

-- name: search_by_custom
-- $1 key, $2 value text, $3 after seq, $4 limit (job_custom_match).
SELECT seq FROM job_custom WHERE key = $1::text AND value = $2::text AND seq > $3::bigint
ORDER BY seq LIMIT $4::bigint;

-- name: search_by_id
SELECT seq FROM jobs WHERE seq = job_seq_of($1::bytea) AND id = $1::bytea AND seq > $2::bigint;

-- name: search_by_key_in_queue
SELECT j.seq FROM idempotency i JOIN jobs j ON j.seq = job_seq_of(i.job_id) AND j.id = i.job_id
WHERE i.queue = $1::text AND i.key = $2::text AND j.seq > $3::bigint;

-- name: search_by_key
-- A key in every queue: one primary-key probe of idempotency per queue holding keys, the
-- queues found by a loose index scan of that same key (each next queue one seek): $1 key,
-- $2 after seq, $3 limit.
WITH RECURSIVE qs(q) AS (
    SELECT (SELECT min(queue) FROM idempotency)
    UNION ALL
    SELECT (SELECT min(queue) FROM idempotency WHERE queue > qs.q) FROM qs WHERE qs.q IS NOT NULL
)
SELECT j.seq FROM qs
JOIN idempotency i ON i.queue = qs.q AND i.key = $1::text
JOIN jobs j ON j.seq = job_seq_of(i.job_id) AND j.id = i.job_id
WHERE j.seq > $2::bigint ORDER BY j.seq LIMIT $3::bigint;

-- name: search_filters
-- The conditions of search_match / search_range (a fragment: admin.py puts a head on it):
-- $2 queue, $3 state, $4 job_type, $5 reason prefix, $6 finished_after, $7 finished_before,
-- $8 error prefilter (ASCII, lowered), each NULL = any; $9 / $10 the custom
-- terms' keys and values (every one must be an entry of the job). lower() folds more than
-- A-Z here (every script), which only lets more through: the prefilter's needle is ASCII,
-- and the exact A-Z check follows in Python (sepp.storage.search). translate() would fold
-- exactly A-Z but costs ~0.15 ms a row (measured: 160 ms for 1,000 histories, lower 15 ms).
($2::text IS NULL OR queue = $2::text) AND ($3::smallint IS NULL OR state::integer = $3::smallint)
  AND ($4::text IS NULL OR job_type = $4::text)
  AND ($5::text IS NULL OR starts_with(reason, $5::text))
  AND ($6::bigint IS NULL OR finished_at >= $6::bigint) AND ($7::bigint IS NULL OR finished_at < $7::bigint)
  AND ($8::text IS NULL OR (state <> 4 AND history IS NOT NULL
       AND strpos(lower(history), $8::text) > 0))
  AND (cardinality($9::text[]) = 0 OR cardinality($9::text[]) = (
      SELECT count(*) FROM unnest($9::text[], $10::text[]) AS t(k, v)
      WHERE EXISTS (SELECT 1 FROM job_custom c WHERE c.seq = jobs.seq AND c.key = t.k AND c.value = t.v)))

-- name: search_match
-- The candidates $1 (seqs) that pass: primary-key lookups.
SELECT seq FROM jobs WHERE seq = ANY($1::bigint[]) AND {filters}

-- name: search_range
-- The jobs with $1 < seq <= $11 that pass, in enqueue order: a range of the primary key.
SELECT seq FROM jobs WHERE seq > $1::bigint AND seq <= $11::bigint AND {filters} ORDER BY seq

-- name: seq_bounds
SELECT (SELECT min(seq) FROM jobs), (SELECT max(seq) FROM jobs);

-- name: job_summaries
-- The listed rows without their payload bytes ($1 their seqs). The history text comes
-- along: the attempts recorded and the last error are derived from it in Python
-- (summaries.attempts), so a history that is not a JSON array never fails the page.
SELECT seq, id, queue, job_type, state, priority, run_at, enqueued_at, attempt, max_attempts,
    octet_length(payload) AS size, encoding, extras, idempotency_key, lease_id, lease_expires_at, worker_id,
    started_at, finished_at, reason, cancel_requested, history, node
FROM jobs WHERE seq = ANY($1::bigint[]);

-- ------------------------------------------------------------------ stats

-- name: count_ready_all
SELECT queue, count(*) FROM jobs WHERE state = 2 GROUP BY queue;

-- name: count_scheduled_all
SELECT queue, count(*) FROM jobs WHERE state = 1 GROUP BY queue;

-- name: count_reserved_all
SELECT queue, count(*) FROM jobs WHERE state = 3 GROUP BY queue;

-- name: count_reserved_by_worker
SELECT worker_id, count(*) FROM jobs WHERE state = 3 GROUP BY worker_id;

-- name: count_finished_all
SELECT queue, state, count(*) FROM jobs WHERE state >= 4 GROUP BY state, queue;

-- name: count_queue
-- One queue ($1): each state through its index.
SELECT
    (SELECT count(*) FROM jobs WHERE state = 1 AND queue = $1::text),
    (SELECT count(*) FROM jobs WHERE state = 2 AND queue = $1::text),
    (SELECT count(*) FROM jobs WHERE state = 3 AND queue = $1::text),
    (SELECT count(*) FROM jobs WHERE state >= 4 AND state = 4 AND queue = $1::text),
    (SELECT count(*) FROM jobs WHERE state >= 4 AND state = 5 AND queue = $1::text),
    (SELECT count(*) FROM jobs WHERE state >= 4 AND state = 6 AND queue = $1::text),
    (SELECT count(*) FROM jobs WHERE state = 7 AND queue = $1::text);

-- name: oldest_ready
-- min(run_at) of a queue's READY jobs: one index seek per priority 0..9 (jobs_ready is
-- ordered by priority first, so a plain min() would scan every ready job of the queue).
SELECT min(f.run_at) FROM generate_series(0, 9) AS p(priority)
CROSS JOIN LATERAL (
    SELECT run_at FROM jobs WHERE queue = $1::text AND state = 2 AND priority = p.priority
    ORDER BY run_at LIMIT 1) AS f;

-- name: oldest_ready_all
-- oldest_ready for every queue at once (NULL for a queue without READY jobs).
-- $1 the queue names.
SELECT q.name, (SELECT min(f.run_at) FROM generate_series(0, 9) AS p(priority)
    CROSS JOIN LATERAL (
        SELECT run_at FROM jobs WHERE queue = q.name AND state = 2 AND priority = p.priority
        ORDER BY run_at LIMIT 1) AS f)
FROM unnest($1::text[]) AS q(name);

-- name: throughput_since
SELECT queue, minute, enqueued, completed, dead_lettered FROM queue_throughput WHERE minute >= $1::bigint;

-- name: add_counts
-- Every node adds its own in-memory counts:
-- a row that exists is added to, never overwritten. Rows in (queue, minute) order, so two
-- nodes adding the same minutes lock them in the same order (no deadlock).
-- $1 queues, $2 minutes, $3 enqueued, $4 completed, $5 dead_lettered (arrays of one length,
-- (queue, minute) unique).
INSERT INTO queue_throughput AS t (queue, minute, enqueued, completed, dead_lettered)
SELECT * FROM unnest($1::text[], $2::bigint[], $3::bigint[], $4::bigint[], $5::bigint[])
ORDER BY 1, 2
ON CONFLICT (queue, minute) DO UPDATE SET enqueued = t.enqueued + excluded.enqueued,
    completed = t.completed + excluded.completed, dead_lettered = t.dead_lettered + excluded.dead_lettered;

-- name: prune_throughput
DELETE FROM queue_throughput WHERE minute < $1::bigint;

-- ------------------------------------------------------------------ single-job writes

-- name: find_key
SELECT job_id, expires_at FROM idempotency WHERE queue = $1::text AND key = $2::text;

-- name: admin_lookup
-- The row an admin write judges, locked until the write commits (a concurrent reserve skips
-- it, a concurrent settle waits), so the state judged is the state written over.
SELECT seq, queue, state FROM jobs WHERE seq = job_seq_of($1::bytea) AND id = $1::bytea FOR UPDATE;

-- name: cancel_now
-- $1 finished_at, $2 purge_at, $3 reason (transitions.cancel), $4 seq; guarded on the state.
UPDATE jobs SET state = 6, finished_at = $1::bigint, purge_at = $2::bigint, reason = $3::text
WHERE seq = $4::bigint AND state::integer IN (1, 2, 7);

-- name: request_cancel
UPDATE jobs SET cancel_requested = 1 WHERE seq = $1::bigint AND state::integer = 3;

-- name: requeue_one
-- Redrive (sepp.domain.transitions.redrive): $1 state (READY), $2 attempt (0),
-- $3 run_at (now), $4 seq; id, payload, extras, priority, max_attempts and history are
-- untouched. lease_id stays, so a stale worker's re-ack is LEASE_EXPIRED. Guarded on the state.
-- A job that still waits for dependencies (deps_left, docs/workflows.md) goes back to DEFERRED.
UPDATE jobs SET state = CASE WHEN deps_left > 0 THEN 7 ELSE $1::smallint END, attempt = $2::integer,
    run_at = $3::bigint, finished_at = NULL, purge_at = NULL, reason = NULL, cancel_requested = 0, dep_failed_by = NULL
WHERE seq = $4::bigint AND state::integer IN (5, 6);

-- name: delete_one
-- One statement: it waits for a concurrent writer of the row and reports the state deleted.
DELETE FROM jobs WHERE seq = job_seq_of($1::bytea) AND id = $1::bytea RETURNING queue, state;

-- name: delete_one_in_state
-- delete_one, only while the job is in state $2 (a concurrent writer is waited for and the
-- state judged on the row it left: READ COMMITTED re-checks the condition).
DELETE FROM jobs WHERE seq = job_seq_of($1::bytea) AND id = $1::bytea AND state::integer = $2::smallint
RETURNING queue, state;

-- ------------------------------------------------------------------ bulk

-- name: count_dead_queue
-- $1 queue, $2 after, $3 before, $4 job_type or NULL, $5 reason prefix or NULL.
SELECT count(*) FROM jobs
WHERE state >= 4 AND state = 5 AND queue = $1::text AND finished_at >= $2::bigint AND finished_at < $3::bigint
  AND ($4::text IS NULL OR job_type = $4::text)
  AND ($5::text IS NULL OR starts_with(reason, $5::text));

-- name: count_dead_all
-- $1 after, $2 before, $3 job_type or NULL, $4 reason prefix or NULL.
SELECT count(*) FROM jobs
WHERE state >= 4 AND state = 5 AND finished_at >= $1::bigint AND finished_at < $2::bigint
  AND ($3::text IS NULL OR job_type = $3::text)
  AND ($4::text IS NULL OR starts_with(reason, $4::text));

-- name: requeue_dead_queue
-- One chunk of a bulk redrive, oldest dead letters first: $1 state, $2 attempt, $3 run_at
-- (transitions.redrive), $4 queue, $5 after, $6 before, $7 job_type, $8 reason prefix,
-- $9 limit. Rows locked by another transaction are skipped (left for a later chunk).
WITH chunk AS MATERIALIZED (
    SELECT seq FROM jobs
    WHERE state >= 4 AND state = 5 AND queue = $4::text AND finished_at >= $5::bigint AND finished_at < $6::bigint
      AND ($7::text IS NULL OR job_type = $7::text)
      AND ($8::text IS NULL OR starts_with(reason, $8::text))
    ORDER BY finished_at, seq LIMIT $9::bigint
    FOR UPDATE SKIP LOCKED)
UPDATE jobs SET state = $1::smallint, attempt = $2::integer, run_at = $3::bigint, finished_at = NULL,
    purge_at = NULL, reason = NULL, cancel_requested = 0
WHERE jobs.seq = ANY(ARRAY(SELECT seq FROM chunk)) AND jobs.state::integer = 5
RETURNING jobs.id, jobs.queue, jobs.job_type, jobs.seq;

-- name: requeue_dead_all
-- As requeue_dead_queue over every queue (jobs_finished order): $1 state, $2 attempt,
-- $3 run_at, $4 after, $5 before, $6 job_type, $7 reason prefix, $8 limit.
WITH chunk AS MATERIALIZED (
    SELECT seq FROM jobs
    WHERE state >= 4 AND state = 5 AND finished_at >= $4::bigint AND finished_at < $5::bigint
      AND ($6::text IS NULL OR job_type = $6::text)
      AND ($7::text IS NULL OR starts_with(reason, $7::text))
    ORDER BY queue, finished_at, seq LIMIT $8::bigint
    FOR UPDATE SKIP LOCKED)
UPDATE jobs SET state = $1::smallint, attempt = $2::integer, run_at = $3::bigint, finished_at = NULL,
    purge_at = NULL, reason = NULL, cancel_requested = 0
WHERE jobs.seq = ANY(ARRAY(SELECT seq FROM chunk)) AND jobs.state::integer = 5
RETURNING jobs.id, jobs.queue, jobs.job_type, jobs.seq;

-- name: purge_scheduled
-- $1 queue, $2 limit (each purge_*): up to $2 rows, locked rows skipped.
WITH chunk AS MATERIALIZED (
    SELECT seq FROM jobs WHERE state = 1 AND queue = $1::text LIMIT $2::bigint FOR UPDATE SKIP LOCKED)
DELETE FROM jobs WHERE jobs.seq = ANY(ARRAY(SELECT seq FROM chunk)) AND jobs.state::integer = 1;

-- name: purge_ready
WITH chunk AS MATERIALIZED (
    SELECT seq FROM jobs WHERE state = 2 AND queue = $1::text LIMIT $2::bigint FOR UPDATE SKIP LOCKED)
DELETE FROM jobs WHERE jobs.seq = ANY(ARRAY(SELECT seq FROM chunk)) AND jobs.state::integer = 2;

-- name: purge_reserved
WITH chunk AS MATERIALIZED (
    SELECT seq FROM jobs WHERE state = 3 AND queue = $1::text LIMIT $2::bigint FOR UPDATE SKIP LOCKED)
DELETE FROM jobs WHERE jobs.seq = ANY(ARRAY(SELECT seq FROM chunk)) AND jobs.state::integer = 3;

-- name: purge_finished
-- $1 queue, $2 limit, $3 state (4, 5 or 6).
WITH chunk AS MATERIALIZED (
    SELECT seq FROM jobs WHERE state >= 4 AND state = $3::smallint AND queue = $1::text LIMIT $2::bigint
    FOR UPDATE SKIP LOCKED)
DELETE FROM jobs WHERE jobs.seq = ANY(ARRAY(SELECT seq FROM chunk)) AND jobs.state::integer = $3::integer;

-- name: lock_queue_row
-- delete_queue: the queue row, locked until the deletion commits (absent = nothing locked).
SELECT 1 FROM queues WHERE name = $1::text FOR UPDATE;

-- name: queue_has_jobs
SELECT EXISTS (SELECT 1 FROM jobs WHERE state = 1 AND queue = $1::text)
    OR EXISTS (SELECT 1 FROM jobs WHERE state = 2 AND queue = $1::text)
    OR EXISTS (SELECT 1 FROM jobs WHERE state = 3 AND queue = $1::text)
    OR EXISTS (SELECT 1 FROM jobs WHERE state >= 4 AND state = 4 AND queue = $1::text)
    OR EXISTS (SELECT 1 FROM jobs WHERE state >= 4 AND state = 5 AND queue = $1::text)
    OR EXISTS (SELECT 1 FROM jobs WHERE state >= 4 AND state = 6 AND queue = $1::text)
    OR EXISTS (SELECT 1 FROM jobs WHERE state = 7 AND queue = $1::text);

-- name: delete_queue_row
DELETE FROM queues WHERE name = $1::text;

-- name: delete_queue_throughput
DELETE FROM queue_throughput WHERE queue = $1::text;

-- name: delete_queue_bucket
-- A deleted queue's token bucket: a queue made again under that name starts full,
-- not with the tokens the old one had left.
DELETE FROM flow_buckets WHERE queue = $1::text;

-- ------------------------------------------------------------------ held-back view

-- name: flow_bucket
-- The token bucket of queue $1 (tokens, updated_at), if any; read without the flow lock.
SELECT tokens, updated_at FROM flow_buckets WHERE queue = $1::text;

-- name: flow_reserved_extras
-- The extras (custom map) of queue $1's RESERVED jobs (jobs_leased).
SELECT extras FROM jobs WHERE queue = $1::text AND state = 3;

-- name: flow_ready_keys
-- The first $2 READY jobs of queue $1 in reserve order with their extras (jobs_ready).
SELECT seq, extras FROM jobs WHERE queue = $1::text AND state = 2 ORDER BY priority DESC, run_at, seq LIMIT $2::bigint;

-- ------------------------------------------------------------------ dependencies (docs/workflows.md)
-- DEFERRED rows (state 7) sit in jobs_finished (WHERE state >= 4) with finished_at NULL, so
-- within a queue that index orders them by seq: enqueue order.

-- name: list_deferred
-- $1 seq, $2 queue or NULL, $3 job_type or NULL, $4 limit.
SELECT seq FROM jobs
WHERE state >= 4 AND state = 7 AND seq > $1::bigint
  AND ($2::text IS NULL OR queue = $2::text) AND ($3::text IS NULL OR job_type = $3::text)
ORDER BY seq LIMIT $4::bigint;

-- name: oldest_deferred_all
-- enqueued_at of the DEFERRED job of lowest seq of every queue of $1 (NULL for a queue
-- without one): one index seek per queue.
SELECT q.name, (SELECT j.enqueued_at FROM jobs j WHERE j.state >= 4 AND j.state = 7 AND j.queue = q.name
                ORDER BY j.finished_at, j.seq LIMIT 1)
FROM unnest($1::text[]) AS q(name);

-- name: waiting_on
-- The ids of the dependencies job $1 (seq) still waits for (its job_waits edges), by their seq.
SELECT p.id FROM job_waits w JOIN jobs p ON p.seq = w.parent_seq WHERE w.child_seq = $1::bigint ORDER BY w.parent_seq;

-- name: revivable
-- Jobs CANCELLED because dependency $1 (seq) failed (_fail_dependents, an enqueue), locked.
SELECT seq FROM jobs WHERE dep_failed_by = $1::bigint AND state = 6 FOR UPDATE;

-- name: other_failed_dependency
-- A dependency job $1 (seq) still waits for that is DEAD_LETTERED or CANCELLED, with the
-- reason naming it: seq, reason, purge_at.
SELECT p.seq, 'DEPENDENCY_FAILED: dependency ' || encode(p.id, 'hex')::uuid::text || ' was '
           || CASE WHEN p.state = 5 THEN 'dead-lettered' ELSE 'cancelled' END, p.purge_at
FROM job_waits w JOIN jobs p ON p.seq = w.parent_seq
WHERE w.child_seq = $1::bigint AND p.state IN (5, 6) LIMIT 1;

-- name: revive_one
-- Back to waiting (DEFERRED; READY when it waits for nothing any more); returns the queue
-- and the new state.
UPDATE jobs SET state = CASE WHEN deps_left > 0 THEN 7 ELSE 2 END, finished_at = NULL, purge_at = NULL,
    reason = NULL, dep_failed_by = NULL
WHERE seq = $1::bigint AND state::integer = 6 RETURNING queue, state;

-- name: reblame
-- Still cancelled, now because of another failed dependency: $1 seq, $2 its seq, $3 reason, $4 purge_at.
UPDATE jobs SET dep_failed_by = $2::bigint, reason = $3::text, purge_at = $4::bigint WHERE seq = $1::bigint;
