-- The job-type figures of the PostgreSQL backend (sepp.storage.type_figures).
-- step 1 = minute rows (the last hour), step 60 = hour rows (the last 24 hours). Every node
-- adds its own counts (never overwrites); rows in key order, so two nodes adding the same
-- rows lock them in the same order (no deadlock), as add_counts does.

-- name: add_type_counts
-- $1 queues, $2 job types, $3 steps, $4 minutes, $5 completed, $6 retried, $7 dead_lettered,
-- $8 runs, $9 run_max (arrays of one length, (queue, step, minute, job_type) unique).
INSERT INTO job_type_figures AS t (queue, job_type, step, minute, completed, retried, dead_lettered, runs, run_max)
SELECT * FROM unnest($1::text[], $2::text[], $3::integer[], $4::bigint[], $5::bigint[], $6::bigint[],
                     $7::bigint[], $8::bigint[], $9::bigint[])
ORDER BY 1, 3, 4, 2
ON CONFLICT (queue, step, minute, job_type) DO UPDATE
    SET completed = t.completed + excluded.completed, retried = t.retried + excluded.retried,
        dead_lettered = t.dead_lettered + excluded.dead_lettered, runs = t.runs + excluded.runs,
        run_max = GREATEST(t.run_max, excluded.run_max);

-- name: add_type_runs
-- $1 queues, $2 job types, $3 steps, $4 minutes, $5 buckets, $6 counts.
INSERT INTO job_type_runtimes AS t (queue, job_type, step, minute, bucket, n)
SELECT * FROM unnest($1::text[], $2::text[], $3::integer[], $4::bigint[], $5::integer[], $6::bigint[])
ORDER BY 1, 3, 4, 2, 5
ON CONFLICT (queue, step, minute, job_type, bucket) DO UPDATE SET n = t.n + excluded.n;

-- name: prune_type_counts
DELETE FROM job_type_figures WHERE step = $1::integer AND minute < $2::bigint;

-- name: prune_type_runs
DELETE FROM job_type_runtimes WHERE step = $1::integer AND minute < $2::bigint;

-- name: delete_queue_types
DELETE FROM job_type_figures WHERE queue = $1::text;

-- name: delete_queue_runs
DELETE FROM job_type_runtimes WHERE queue = $1::text;

-- name: type_totals
-- One queue's rows of one step ($2) from minute $3 on, summed per job type: a primary-key range.
SELECT job_type, sum(completed), sum(retried), sum(dead_lettered), sum(runs), max(run_max)
FROM job_type_figures WHERE queue = $1::text AND step = $2::integer AND minute >= $3::bigint
GROUP BY job_type;

-- name: type_buckets
SELECT job_type, bucket, sum(n)
FROM job_type_runtimes WHERE queue = $1::text AND step = $2::integer AND minute >= $3::bigint
GROUP BY job_type, bucket;
