-- The job-type figures of the PostgreSQL backend (issue 13 item 2; sepp.storage.type_figures).
-- Every node adds its own counts (never overwrites); rows in key order, so two nodes adding
-- the same rows lock them in the same order (no deadlock), as add_counts does.

-- name: add_type_counts
-- $1 queues, $2 job types, $3 minutes, $4 completed, $5 retried, $6 dead_lettered, $7 runs,
-- $8 run_max (arrays of one length, (queue, minute, job_type) unique).
INSERT INTO job_type_figures AS t (queue, job_type, minute, completed, retried, dead_lettered, runs, run_max)
SELECT * FROM unnest($1::text[], $2::text[], $3::bigint[], $4::bigint[], $5::bigint[], $6::bigint[],
                     $7::bigint[], $8::bigint[])
ORDER BY 1, 3, 2
ON CONFLICT (queue, minute, job_type) DO UPDATE
    SET completed = t.completed + excluded.completed, retried = t.retried + excluded.retried,
        dead_lettered = t.dead_lettered + excluded.dead_lettered, runs = t.runs + excluded.runs,
        run_max = GREATEST(t.run_max, excluded.run_max);

-- name: add_type_runs
-- $1 queues, $2 job types, $3 minutes, $4 buckets, $5 counts.
INSERT INTO job_type_runtimes AS t (queue, job_type, minute, bucket, n)
SELECT * FROM unnest($1::text[], $2::text[], $3::bigint[], $4::integer[], $5::bigint[])
ORDER BY 1, 3, 2, 4
ON CONFLICT (queue, minute, job_type, bucket) DO UPDATE SET n = t.n + excluded.n;

-- name: prune_type_counts
DELETE FROM job_type_figures WHERE minute < $1::bigint;

-- name: prune_type_runs
DELETE FROM job_type_runtimes WHERE minute < $1::bigint;

-- name: delete_queue_types
DELETE FROM job_type_figures WHERE queue = $1::text;

-- name: delete_queue_runs
DELETE FROM job_type_runtimes WHERE queue = $1::text;

-- name: type_totals
-- One queue's job types since $2 (minute), and since $3; the primary key's range.
SELECT job_type,
    sum(completed), sum(retried), sum(dead_lettered), sum(runs), max(run_max),
    sum(CASE WHEN minute >= $3 THEN completed ELSE 0 END),
    sum(CASE WHEN minute >= $3 THEN retried ELSE 0 END),
    sum(CASE WHEN minute >= $3 THEN dead_lettered ELSE 0 END),
    sum(CASE WHEN minute >= $3 THEN runs ELSE 0 END),
    max(CASE WHEN minute >= $3 THEN run_max ELSE 0 END)
FROM job_type_figures WHERE queue = $1::text AND minute >= $2::bigint
GROUP BY job_type;

-- name: type_buckets
SELECT job_type, bucket, sum(n), sum(CASE WHEN minute >= $3 THEN n ELSE 0 END)
FROM job_type_runtimes WHERE queue = $1::text AND minute >= $2::bigint
GROUP BY job_type, bucket;
