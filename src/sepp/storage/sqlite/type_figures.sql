-- The job-type figures of the SQLite backend (issue 13 item 2; sepp.storage.type_figures).

-- name: add_type_counts
INSERT INTO job_type_figures (queue, job_type, minute, completed, retried, dead_lettered, runs, run_max)
VALUES (?, ?, ?, ?, ?, ?, ?, ?)
ON CONFLICT (queue, minute, job_type) DO UPDATE
    SET completed = completed + excluded.completed, retried = retried + excluded.retried,
        dead_lettered = dead_lettered + excluded.dead_lettered, runs = runs + excluded.runs,
        run_max = max(run_max, excluded.run_max);

-- name: add_type_runs
INSERT INTO job_type_runtimes (queue, job_type, minute, bucket, n) VALUES (?, ?, ?, ?, ?)
ON CONFLICT (queue, minute, job_type, bucket) DO UPDATE SET n = n + excluded.n;

-- name: prune_type_counts
DELETE FROM job_type_figures WHERE minute < ?;

-- name: prune_type_runs
DELETE FROM job_type_runtimes WHERE minute < ?;

-- name: delete_queue_types
DELETE FROM job_type_figures WHERE queue = ?;

-- name: delete_queue_runs
DELETE FROM job_type_runtimes WHERE queue = ?;

-- name: type_totals
-- One queue's job types since :day (minute), and since :hour; the primary key's range.
SELECT job_type,
    sum(completed), sum(retried), sum(dead_lettered), sum(runs), max(run_max),
    sum(CASE WHEN minute >= :hour THEN completed ELSE 0 END),
    sum(CASE WHEN minute >= :hour THEN retried ELSE 0 END),
    sum(CASE WHEN minute >= :hour THEN dead_lettered ELSE 0 END),
    sum(CASE WHEN minute >= :hour THEN runs ELSE 0 END),
    max(CASE WHEN minute >= :hour THEN run_max ELSE 0 END)
FROM job_type_figures WHERE queue = :queue AND minute >= :day
GROUP BY job_type;

-- name: type_buckets
SELECT job_type, bucket, sum(n), sum(CASE WHEN minute >= :hour THEN n ELSE 0 END)
FROM job_type_runtimes WHERE queue = :queue AND minute >= :day
GROUP BY job_type, bucket;
