-- The job-type figures of the SQLite backend (sepp.storage.type_figures).
-- step 1 = minute rows (the last hour), step 60 = hour rows (the last 24 hours).

-- name: add_type_counts
INSERT INTO job_type_figures (queue, job_type, step, minute, completed, retried, dead_lettered, runs, run_max)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)
ON CONFLICT (queue, step, minute, job_type) DO UPDATE
    SET completed = completed + excluded.completed, retried = retried + excluded.retried,
        dead_lettered = dead_lettered + excluded.dead_lettered, runs = runs + excluded.runs,
        run_max = max(run_max, excluded.run_max);

-- name: add_type_runs
INSERT INTO job_type_runtimes (queue, job_type, step, minute, bucket, n) VALUES (?, ?, ?, ?, ?, ?)
ON CONFLICT (queue, step, minute, job_type, bucket) DO UPDATE SET n = n + excluded.n;

-- name: prune_type_counts
DELETE FROM job_type_figures WHERE step = ? AND minute < ?;

-- name: prune_type_runs
DELETE FROM job_type_runtimes WHERE step = ? AND minute < ?;

-- name: delete_queue_types
DELETE FROM job_type_figures WHERE queue = ?;

-- name: delete_queue_runs
DELETE FROM job_type_runtimes WHERE queue = ?;

-- name: type_totals
-- One queue's rows of one step from :since (minute) on, summed per job type: a primary-key range.
SELECT job_type, sum(completed), sum(retried), sum(dead_lettered), sum(runs), max(run_max)
FROM job_type_figures WHERE queue = :queue AND step = :step AND minute >= :since
GROUP BY job_type;

-- name: type_buckets
SELECT job_type, bucket, sum(n)
FROM job_type_runtimes WHERE queue = :queue AND step = :step AND minute >= :since
GROUP BY job_type, bucket;
