-- Named queries of the PostgreSQL backend ($n parameters). Times bigint µs UTC, ids 16-byte
-- bytea. Every statement that changes a job a worker or another node may touch at the same
-- moment either locks it first (FOR UPDATE / FOR UPDATE SKIP LOCKED) or guards the write on
-- the state it judged (lease id and state in the WHERE), so several nodes may run it at once.
--
-- A statement that changes jobs it finds by id or seq (one job, an array of seqs, or the
-- rows a CTE chose) writes its state guard on them as `state::integer = N`: the same test,
-- but one the planner cannot match to the partial indexes (jobs_ready, jobs_scheduled,
-- jobs_leased, jobs_finished; jobs_reserved before migration 0008). With `state = N`, a
-- planner whose last ANALYZE saw no row in that state took the index as almost free and
-- read every job of the state to find each one (20,480 leased: one ack 4 ms instead of 0.16; 20,000 due: a promotion
-- chunk of 1,000 took 2.6 s). A CTE that *selects* rows keeps `state = N` and its index;
-- the statement that changes them finds them as `seq = ANY(ARRAY(SELECT seq FROM chunk))`
-- (the CTE runs once, its seqs go to the primary key): joined as `j.seq = chunk.seq`, a
-- planner that knew the chunk's size hashed it and read the whole table (fresh statistics,
-- 83,000 jobs: a promotion chunk 17.5 ms instead of 7.5).
-- tests/storage/test_query_plans_postgres.py pins the plans with stale statistics.

-- name: take_seqs
-- $1 fresh values of the jobs sequence, each the first of a block of 1,024 seqs a node
-- makes its next job ids of (sepp.storage.postgres.ids; migration 0010).
SELECT nextval('jobs_seq_seq') FROM generate_series(1, $1::integer);

-- Inserts: a node stores every row with a seq of its blocks ($13, or the last array): the
-- one its id carries, or for a foreign id the next of the node's (jobs_id_foreign).

-- name: insert_job
INSERT INTO jobs (id, queue, job_type, state, priority, run_at, enqueued_at, max_attempts,
                  payload, encoding, extras, idempotency_key, seq)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13);

-- name: insert_jobs
-- Many rows in one statement: one array per column (JobRow order, then seq).
INSERT INTO jobs (id, queue, job_type, state, priority, run_at, enqueued_at, max_attempts,
                  payload, encoding, extras, idempotency_key, seq)
SELECT * FROM unnest($1::bytea[], $2::text[], $3::text[], $4::smallint[], $5::integer[], $6::bigint[],
                     $7::bigint[], $8::integer[], $9::bytea[], $10::text[], $11::bytea[], $12::text[],
                     $13::bigint[]);

-- name: insert_jobs_notify
-- insert_jobs and its wake-up in one statement, run outside a transaction block (it
-- commits by itself: one round trip): $14 the channel, $15 the payload (NULL: no READY
-- row, no NOTIFY).
WITH ins AS (
    INSERT INTO jobs (id, queue, job_type, state, priority, run_at, enqueued_at, max_attempts,
                      payload, encoding, extras, idempotency_key, seq)
    SELECT * FROM unnest($1::bytea[], $2::text[], $3::text[], $4::smallint[], $5::integer[], $6::bigint[],
                         $7::bigint[], $8::integer[], $9::bytea[], $10::text[], $11::bytea[], $12::text[],
                         $13::bigint[])
)
SELECT pg_notify($14, $15) WHERE $15::text IS NOT NULL;

-- name: insert_custom
-- The custom-index entries of jobs just inserted (migration 0004): $1 job
-- ids, $2 keys, $3 values as text, one element per entry.
INSERT INTO job_custom (seq, key, value)
SELECT j.seq, e.key, e.value FROM unnest($1::bytea[], $2::text[], $3::text[]) AS e(id, key, value)
JOIN jobs j ON j.seq = job_seq_of(e.id) AND j.id = e.id;

-- name: native_taken
-- Which of the foreign ids $1 a job already has as its native id (the seq it carries): such
-- an id is refused (PostgresStore.enqueue), jobs_id_foreign holds foreign ids only.
SELECT j.id FROM unnest($1::bytea[]) AS f(id) JOIN jobs j ON j.seq = job_seq_hint(f.id) AND j.id = f.id;

-- name: claim_keys
-- Claim idempotency keys (distinct within the call): a key nobody holds, or whose claim has
-- expired ($5 = now), is taken for the new job; a live claim is left alone and not
-- returned. The unique key makes this exactly-once across nodes: a racing transaction
-- waits here for the other's commit or rollback (never read-then-write).
INSERT INTO idempotency AS i (queue, key, job_id, expires_at)
SELECT * FROM unnest($1::text[], $2::text[], $3::bytea[], $4::bigint[])
ON CONFLICT (queue, key) DO UPDATE SET job_id = excluded.job_id, expires_at = excluded.expires_at
    WHERE i.expires_at <= $5
RETURNING queue, key;

-- name: held_keys
-- The holders of keys that claim_keys did not take, with the holder's state (NULL when the
-- job is gone: purged while its key is still claimed).
SELECT i.queue, i.key, i.job_id, j.state
FROM unnest($1::text[], $2::text[]) AS w(queue, key)
JOIN idempotency i ON i.queue = w.queue AND i.key = w.key
LEFT JOIN jobs j ON j.seq = job_seq_of(i.job_id) AND j.id = i.job_id;

-- name: insert_queue_if_absent
INSERT INTO queues (name, settings, paused, declared, created_at, updated_at)
VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (name) DO NOTHING;

-- name: upsert_queue
INSERT INTO queues (name, settings, paused, declared, created_at, updated_at)
VALUES ($1, $2, $3, $4, $5, $6)
ON CONFLICT (name) DO UPDATE SET settings = excluded.settings, paused = excluded.paused,
    declared = excluded.declared, updated_at = excluded.updated_at;

-- name: lock_queue
-- The queue's row as stored, locked for the rest of the transaction (Store.change_queue).
SELECT name, settings, paused, declared FROM queues WHERE name = $1 FOR UPDATE;

-- name: update_queue
UPDATE queues SET settings = $2, paused = $3, declared = $4, updated_at = $5 WHERE name = $1;

-- name: load_queues
SELECT name, settings, paused, declared FROM queues ORDER BY name;

-- name: promote_due
-- Due SCHEDULED jobs → READY; rows another node is promoting right now are skipped (it
-- promotes them), so every job is promoted exactly once however many nodes sweep. Run by
-- the sweeper and by every Reserve first; returns what the promotion lag and the live job
-- events name of each job (sepp.domain.params.promotion).
-- Every chunk below is a MATERIALIZED CTE: as `seq IN (SELECT … LIMIT n FOR UPDATE SKIP
-- LOCKED)` the planner may re-run the subquery per outer row and touch more than n rows.
WITH chunk AS MATERIALIZED (
    SELECT seq FROM jobs WHERE state = 1 AND run_at <= $1 ORDER BY run_at LIMIT $2 FOR UPDATE SKIP LOCKED
)
UPDATE jobs j SET state = 2 WHERE j.seq = ANY(ARRAY(SELECT seq FROM chunk)) AND j.state::integer = 1
RETURNING j.queue, j.run_at, j.id, j.job_type, j.attempt;

-- name: next_due
-- Not min(run_at): a planner that thought no job SCHEDULED aggregated over all of them.
SELECT run_at FROM jobs WHERE state = 1 ORDER BY run_at LIMIT 1;

-- name: lease_ready
-- Lease the next $2 READY jobs of queue $1 in reserve order (priority DESC, run_at, seq),
-- skipping rows another reserver holds (no job is leased twice): $3 lease id, $4 expiry,
-- $5 worker, $6 now, $7 the leasing node. RETURNING has no order: the caller sorts by
-- (priority DESC, run_at, seq).
WITH picked AS MATERIALIZED (
    SELECT seq FROM jobs WHERE queue = $1 AND state = 2 ORDER BY priority DESC, run_at, seq LIMIT $2
    FOR UPDATE SKIP LOCKED
)
UPDATE jobs j SET state = 3, attempt = j.attempt + 1, lease_id = $3, lease_expires_at = $4, worker_id = $5,
    started_at = $6, cancel_requested = 0, node = $7
FROM picked WHERE j.seq = picked.seq
RETURNING j.id, j.job_type, j.priority, j.run_at, j.enqueued_at, j.attempt, j.max_attempts,
    coalesce(j.payload, '\x'::bytea) AS payload, j.encoding, j.extras, j.idempotency_key, j.history, j.seq;

-- name: lease_within
-- With a byte budget, in one statement: lock the next $2 READY jobs of queue $1 in reserve
-- order, and lease the prefix of them whose running size (payload + history bytes) stays
-- within $8 bytes; the first is leased anyway when $9 (the call has no job yet), so one
-- job larger than the budget is still delivered. $3 lease id, $4 expiry,
-- $5 worker, $6 now, $7 the leasing node. The rest of the chunk stays locked until the
-- transaction ends (another reserver skips it). RETURNING as lease_ready.
WITH locked AS MATERIALIZED (
    SELECT seq, priority, run_at, octet_length(coalesce(payload, '\x'::bytea)) + coalesce(octet_length(history), 0) AS n
    FROM jobs WHERE queue = $1 AND state = 2 ORDER BY priority DESC, run_at, seq LIMIT $2
    FOR UPDATE SKIP LOCKED
), sized AS MATERIALIZED (
    SELECT seq, sum(n) OVER w AS upto, row_number() OVER w AS k FROM locked
    WINDOW w AS (ORDER BY priority DESC, run_at, seq ROWS UNBOUNDED PRECEDING)
)
UPDATE jobs j SET state = 3, attempt = j.attempt + 1, lease_id = $3, lease_expires_at = $4, worker_id = $5,
    started_at = $6, cancel_requested = 0, node = $7
WHERE j.seq = ANY(ARRAY(SELECT seq FROM sized WHERE upto <= $8 OR (k = 1 AND $9::boolean)))
RETURNING j.id, j.job_type, j.priority, j.run_at, j.enqueued_at, j.attempt, j.max_attempts,
    coalesce(j.payload, '\x'::bytea) AS payload, j.encoding, j.extras, j.idempotency_key, j.history, j.seq;

-- name: lease_seqs
-- Lease the seqs $1 (chosen by flow_ready or ready_keys): $2 lease id, $3 expiry, $4 worker, $5 now, $6 node.
UPDATE jobs j SET state = 3, attempt = j.attempt + 1, lease_id = $2, lease_expires_at = $3, worker_id = $4,
    started_at = $5, cancel_requested = 0, node = $6
WHERE j.seq = ANY($1::bigint[]) AND j.state::integer = 2
RETURNING j.id, j.job_type, j.priority, j.run_at, j.enqueued_at, j.attempt, j.max_attempts,
    coalesce(j.payload, '\x'::bytea) AS payload, j.encoding, j.extras, j.idempotency_key, j.history, j.seq;

-- name: bury_leased
-- A just-leased job the server could not convert: $1 now, $2 reason, $3 job
-- id, $4 its lease id. No purge time (kept until an admin deletes or requeues it).
UPDATE jobs SET state = 5, finished_at = $1, purge_at = NULL, reason = $2
WHERE seq = coalesce((SELECT f.seq FROM jobs f WHERE f.id = $3 AND job_id_foreign(f.id, f.seq)), job_seq_hint($3)) AND id = $3
    AND lease_id = $4 AND state::integer = 3;

-- name: ack_many
-- Acks of live leases in one statement: $1 now, $2 completed retention (µs), $3/$4 the job
-- ids and lease ids. Returns what it completed. The completing attempt is not appended to
-- history (JobRecord.attempt_entries derives it). Each (id, lease) is probed through
-- jobs_pkey at the seq the id carries, after jobs_id_foreign (an empty index but for ids
-- of migration 0010's foreign kind; OFFSET 0 keeps the probe a per-id index lookup), then the rows found are
-- updated by seq. Joining jobs to the ids directly let a planner whose statistics saw no
-- RESERVED job scan the table once per id (13 ms a batch of 256 instead of 2.6 at 20,000
-- jobs; benchmarks/postgres_drain.py). The probe takes no row lock (a lock is a WAL record
-- per job): a row another transaction changes after this statement's snapshot is re-checked
-- by the UPDATE's own guard (state RESERVED, a lease of this batch, not expired), and a
-- lease that changes concurrently is a new Reserve's, whose lease id this batch cannot hold
-- (docs/decisions.md "PostgreSQL: batched acks probe each job by id"). The UPDATE locks rows
-- in seq order (the pkey scan of the array), the same order for any two acks of shared jobs.
WITH hit AS MATERIALIZED (
    SELECT f.seq FROM unnest($3::bytea[], $4::bytea[]) AS v(jid, lid)
    CROSS JOIN LATERAL (
        SELECT seq FROM jobs
        WHERE seq = coalesce((SELECT f.seq FROM jobs f WHERE f.id = v.jid AND job_id_foreign(f.id, f.seq)), job_seq_hint(v.jid))
            AND id = v.jid AND lease_id = v.lid AND state::integer = 3 AND lease_expires_at > $1
        OFFSET 0
    ) f
)
UPDATE jobs j SET state = 4, finished_at = $1, purge_at = $1 + $2
WHERE j.seq = ANY(ARRAY(SELECT seq FROM hit)) AND j.state::integer = 3 AND j.lease_id = ANY($4::bytea[])
    AND j.lease_expires_at > $1
RETURNING j.id, j.queue, j.attempt, j.seq, j.started_at, j.job_type;

-- name: ack_many_results
-- ack_many for acks of which some carry a result: $5/$6 each ack's result and its encoding
-- (NULL, NULL for one without), written by the same statement as the completion. The probe
-- carries them along; the UPDATE still finds its rows through the array of their seqs
-- (jobs_pkey, locked in seq order as in ack_many) and takes each one's result from the
-- probe's row of that seq. The acks of a Settle that carry no result use ack_many, which
-- binds and writes nothing more.
WITH hit AS MATERIALIZED (
    SELECT f.seq, v.res, v.enc FROM unnest($3::bytea[], $4::bytea[], $5::bytea[], $6::text[]) AS v(jid, lid, res, enc)
    CROSS JOIN LATERAL (
        SELECT seq FROM jobs
        WHERE seq = coalesce((SELECT f.seq FROM jobs f WHERE f.id = v.jid AND job_id_foreign(f.id, f.seq)), job_seq_hint(v.jid))
            AND id = v.jid AND lease_id = v.lid AND state::integer = 3 AND lease_expires_at > $1
        OFFSET 0
    ) f
)
UPDATE jobs j SET state = 4, finished_at = $1, purge_at = $1 + $2, result = h.res, result_encoding = h.enc
FROM hit h
WHERE j.seq = ANY(ARRAY(SELECT seq FROM hit)) AND h.seq = j.seq AND j.state::integer = 3
    AND j.lease_id = ANY($4::bytea[]) AND j.lease_expires_at > $1
RETURNING j.id, j.queue, j.attempt, j.seq, j.started_at, j.job_type;

-- name: set_purge_at
UPDATE jobs SET purge_at = $1 WHERE seq = ANY($2::bigint[]);

-- name: get_job
SELECT id, queue, job_type, state, priority, run_at, enqueued_at, attempt, max_attempts,
    coalesce(payload, '\x'::bytea) AS payload, encoding, extras, idempotency_key, lease_id, lease_expires_at,
    worker_id, started_at, history, finished_at, reason, cancel_requested, seq, node, result, result_encoding, progress
FROM jobs WHERE seq = coalesce((SELECT f.seq FROM jobs f WHERE f.id = $1 AND job_id_foreign(f.id, f.seq)), job_seq_hint($1)) AND id = $1;

-- name: settle_lookup
-- The job a settle or extend judges, locked until the transaction ends (another node's
-- reclaim or settle of it waits), so the write below finds it as judged.
SELECT seq, queue, state, lease_id, lease_expires_at, attempt, max_attempts, worker_id, started_at,
    cancel_requested, run_at, node, job_type
FROM jobs WHERE seq = coalesce((SELECT f.seq FROM jobs f WHERE f.id = $1 AND job_id_foreign(f.id, f.seq)), job_seq_hint($1)) AND id = $1 FOR UPDATE;

-- name: settle_update
-- Apply a transition (sepp.domain.transitions.Decision) under the lease guard: $1 state,
-- $2 run_at, $3 attempt, $4 finished_at, $5 purge_at, $6 reason, $7 the history entry
-- appended (compact JSON text), $8 seq, $9 lease id.
UPDATE jobs SET state = $1, run_at = $2, attempt = $3, finished_at = $4, purge_at = $5, reason = $6,
    history = CASE WHEN history IS NULL OR history = '' OR history = '[]' THEN '[' || $7 || ']'
                   ELSE left(history, -1) || ',' || $7 || ']' END
WHERE seq = $8 AND lease_id IS NOT DISTINCT FROM $9 AND state::integer = 3;

-- name: reclaim_ready
-- A reclaimed lease back to READY: $1 state, $2 the history entry; guarded: $3 seq, $4 lease id.
UPDATE jobs SET state = $1,
    history = CASE WHEN history IS NULL OR history = '' OR history = '[]' THEN '[' || $2 || ']'
                   ELSE left(history, -1) || ',' || $2 || ']' END
WHERE seq = $3 AND lease_id IS NOT DISTINCT FROM $4 AND state::integer = 3;

-- name: complete_one
-- One ack of a live lease: $1 finished_at, $2 purge_at; guarded: $3 seq, $4 lease id; $5
-- the result and $6 its encoding (NULL, NULL: none).
UPDATE jobs SET state = 4, finished_at = $1, purge_at = $2, reason = NULL, result = $5, result_encoding = $6
WHERE seq = $3 AND lease_id IS NOT DISTINCT FROM $4 AND state::integer = 3;

-- name: extend_lease
UPDATE jobs SET lease_expires_at = $1 WHERE seq = $2;

-- name: extend_lease_progress
-- An extension that carries the handler's progress (JSON text): $1 expiry, $2 progress, $3 seq.
UPDATE jobs SET lease_expires_at = $1, progress = $2 WHERE seq = $3;

-- name: sweep_no_jit
-- Before expired_leases, in its transaction: no JIT compilation. The planner estimates the
-- per-queue probes at ~100 queues (a recursive CTE's guess) times each one's expired
-- leases, which passes jit_above_cost as soon as a few thousand leases expired: it then
-- spent ~20 ms compiling a statement that runs in ~30 (one queue, 20,000 expired). For the
-- rest of the committer's transaction: the other operations of its group (all short
-- statements) run without JIT too.
SET LOCAL jit = off;

-- name: expired_leases
-- Up to $2 expired leases (expiry <= $1) of every queue, oldest first (expiry, seq), locked;
-- a lease another node is reclaiming or settling right now is skipped (it handles it).
-- jobs_leased is (queue, lease_expires_at) WHERE state = 3 (migration 0008), so there is no
-- single index walk in expiry order across queues: `qs` finds every queue that holds a
-- RESERVED job by a skip scan of that index (one descent per such queue, from the index
-- itself: the queues table may lack a queue whose row another node deleted while this one
-- still enqueued to it), `picked` takes the $2 oldest expired leases of each queue (one
-- range of the index each: the queue's expired leases read in order up to $2, or read
-- whole and sorted, as the planner prefers) and keeps the $2 oldest of them all, unlocked.
-- The rows are then locked by seq, SKIP LOCKED, and the lock re-reads each one: a lease
-- settled, extended or reclaimed since the snapshot fails `state::integer = 3 AND
-- lease_expires_at <= $1` and is left out. Locking inside the per-queue probes would lock
-- up to $2 rows per queue and return only $2.
WITH RECURSIVE qs(q) AS (
    SELECT (SELECT queue FROM jobs WHERE state = 3 ORDER BY queue LIMIT 1)
    UNION ALL
    SELECT (SELECT queue FROM jobs WHERE state = 3 AND queue > qs.q ORDER BY queue LIMIT 1)
    FROM qs WHERE qs.q IS NOT NULL
), picked AS MATERIALIZED (
    SELECT e.seq FROM qs CROSS JOIN LATERAL (
        SELECT seq, lease_expires_at FROM jobs
        WHERE state = 3 AND queue = qs.q AND lease_expires_at <= $1
        ORDER BY lease_expires_at, seq LIMIT $2
    ) e
    ORDER BY e.lease_expires_at, e.seq LIMIT $2
)
SELECT seq, queue, attempt, max_attempts, worker_id, started_at, lease_expires_at, cancel_requested, node, id,
    lease_id, job_type
FROM jobs WHERE seq = ANY(ARRAY(SELECT seq FROM picked)) AND state::integer = 3 AND lease_expires_at <= $1
ORDER BY lease_expires_at, seq
FOR UPDATE SKIP LOCKED;

-- name: prune_jobs
WITH chunk AS MATERIALIZED (
    SELECT seq FROM jobs WHERE purge_at <= $1 ORDER BY purge_at LIMIT $2 FOR UPDATE SKIP LOCKED
)
DELETE FROM jobs j WHERE j.seq = ANY(ARRAY(SELECT seq FROM chunk));

-- name: prune_idempotency
WITH chunk AS MATERIALIZED (
    SELECT queue, key FROM idempotency WHERE expires_at <= $1 ORDER BY expires_at LIMIT $2 FOR UPDATE SKIP LOCKED
)
DELETE FROM idempotency i USING chunk WHERE i.queue = chunk.queue AND i.key = chunk.key;

-- name: prune_workflow_keys
-- Expired workflow keys (dedup_until ≤ $1, µs UTC), at most $2, oldest first (workflow_keys_expiry).
WITH chunk AS MATERIALIZED (
    SELECT idempotency_key FROM workflow_keys WHERE dedup_until <= $1 ORDER BY dedup_until LIMIT $2
    FOR UPDATE SKIP LOCKED
)
DELETE FROM workflow_keys w USING chunk WHERE w.idempotency_key = chunk.idempotency_key;

-- name: notify
SELECT pg_notify($1, $2);

-- name: forget_node_workers
-- Store.report_workers, step 1: $1 the reporting node's name.
DELETE FROM workers WHERE node = $1;

-- name: report_workers
-- Store.report_workers, step 2: the node's workers as parallel arrays ($1 worker_id …, $10
-- failed_minute; $11 the node; $12 stopped_at). Each worker's queues travel as one JSON array
-- text (a text[][] would need every worker to have as many queues).
INSERT INTO workers (worker_id, node, host, queues, concurrency, client_version, first_seen, last_reserve,
                     last_seen, completed_minute, failed_minute, stopped_at)
SELECT w, $11::text, h, ARRAY(SELECT json_array_elements_text(q::json)), c, v, f, r, s, d, x, z
FROM unnest($1::text[], $2::text[], $3::text[], $4::int[], $5::text[], $6::bigint[], $7::bigint[], $8::bigint[],
            $9::bigint[], $10::bigint[], $12::bigint[]) AS t(w, h, q, c, v, f, r, s, d, x, z)
ON CONFLICT (worker_id, node) DO UPDATE SET host = excluded.host, queues = excluded.queues,
    concurrency = excluded.concurrency, client_version = excluded.client_version, first_seen = excluded.first_seen,
    last_reserve = excluded.last_reserve, last_seen = excluded.last_seen,
    completed_minute = excluded.completed_minute, failed_minute = excluded.failed_minute,
    stopped_at = excluded.stopped_at;

-- name: forget_old_workers
-- Store.report_workers, step 3: rows of any node not seen since $1 (µs UTC).
DELETE FROM workers WHERE last_seen < $1;

-- name: workers
SELECT worker_id, node, host, queues, concurrency, client_version, first_seen, last_reserve, last_seen,
       completed_minute, failed_minute, stopped_at
FROM workers ORDER BY worker_id, node;

-- name: heartbeat
-- A node is alive: $1 name, $2 address, $3 version, $4 started_at, $5 last_seen (µs UTC).
INSERT INTO nodes (name, address, version, started_at, last_seen) VALUES ($1, $2, $3, $4, $5)
ON CONFLICT (name) DO UPDATE SET address = excluded.address, version = excluded.version,
    started_at = excluded.started_at, last_seen = excluded.last_seen;

-- name: nodes
SELECT name, address, version, started_at, last_seen FROM nodes ORDER BY name;

-- name: ping
-- Readiness (Store.ping): the store answers a trivial query.
SELECT 1;

-- name: promote_due_locking
-- promote_due ($1 now, $2 limit) that first takes the flow lock of each queue of $3 (keyed
-- by schema and queue: advisory locks are database-wide), in name order, for the rest of the transaction: a Reserve of a queue with
-- max_in_flight or a per-key limit pays no statement of its own for the lock
-- (benchmark). The counts it makes next run in statements whose snapshot is taken after
-- the locks are held, so they see what every earlier holder committed. One row per job
-- promoted, or one row of NULLs when none was (the aggregate over `locks` makes every
-- lock be taken whatever `promoted` returns).
WITH locks AS MATERIALIZED (
    SELECT pg_advisory_xact_lock(hashtextextended('sepp.flow/' || current_schema() || '/' || q, 0))
    FROM (SELECT DISTINCT q FROM unnest($3::text[]) AS u(q) ORDER BY q) AS s
), chunk AS MATERIALIZED (
    SELECT seq FROM jobs WHERE state = 1 AND run_at <= $1 ORDER BY run_at LIMIT $2 FOR UPDATE SKIP LOCKED
), promoted AS (
    UPDATE jobs j SET state = 2 WHERE j.seq = ANY(ARRAY(SELECT seq FROM chunk)) AND j.state::integer = 1
    RETURNING j.queue, j.run_at, j.id, j.job_type, j.attempt
)
SELECT p.queue, p.run_at, p.id, p.job_type, p.attempt FROM (SELECT count(*) FROM locks) AS l(n)
LEFT JOIN promoted p ON true;

-- name: flow_ready
-- Flow control: one statement for what a limited Reserve of queue $1 needs
-- before it leases: a bound on the RESERVED jobs of the queue when $4 (max_in_flight or a
-- per-key limit; the caller holds the queue's flow lock), its token bucket row read and
-- locked FOR UPDATE when $5 (a rate limit: the row lock serialises every node's draw
-- from the bucket, and READ COMMITTED hands FOR UPDATE the latest committed version), and
-- the next READY jobs in reserve order with their sizes (payload + history bytes), locked
-- like lease_within's chunk: at most $2, and at most the free slots under max_in_flight $3 (0 =
-- none). The bound (migration 0007): the row of flow_counts when it was checked at most
-- 1 s before $6 (now, µs) and it plus the $2 wanted stays within $7 (the smallest limit
-- that counts: max_in_flight or max_in_flight_per_key); else the exact count, which
-- becomes the row's new checkpoint. Either way the row's `leased` grows by what this
-- Reserve may lease: the READY jobs it picked (it leases only among them), or all $2 with
-- a per-key limit ($8: its group walk, flow.key_seqs, may lease jobs outside `picked`).
-- Growing by $2 always let a Reserve that found few or no jobs (an idle queue's long-polls)
-- push the bound to the limit, and every later Reserve counted. Rows:
-- (reserved bound, bucket rows found, tokens, updated_at, seq, size), one per job in
-- reserve order, or one with NULL seq when no job is READY.
WITH c AS MATERIALIZED (
    SELECT ck_reserved + leased - ck_leased AS bound FROM flow_counts
    WHERE queue = $1 AND $4::boolean AND ck_at BETWEEN $6::bigint - 1000000 AND $6::bigint
        AND ck_reserved + leased - ck_leased + $2::bigint <= $7::bigint
), exact AS MATERIALIZED (
    SELECT count(*) AS n FROM jobs
    WHERE queue = $1 AND state = 3 AND $4::boolean AND NOT EXISTS (SELECT 1 FROM c)
), n AS MATERIALIZED (
    SELECT coalesce((SELECT bound FROM c), (SELECT n FROM exact)) AS n, NOT EXISTS (SELECT 1 FROM c) AS counted
), b AS MATERIALIZED (
    SELECT tokens, updated_at FROM flow_buckets WHERE queue = $1 AND $5::boolean FOR UPDATE
), picked AS MATERIALIZED (
    SELECT seq, octet_length(coalesce(payload, '\x'::bytea)) + coalesce(octet_length(history), 0) AS size,
        priority, run_at
    FROM jobs WHERE queue = $1 AND state = 2 ORDER BY priority DESC, run_at, seq
    LIMIT CASE WHEN $3::bigint > 0 THEN greatest(0, least($2::bigint, $3::bigint - (SELECT n FROM n))) ELSE $2 END
    FOR UPDATE SKIP LOCKED
), bump AS MATERIALIZED (
    SELECT CASE WHEN $8::boolean THEN $2::bigint ELSE (SELECT count(*) FROM picked) END AS k
), w AS (
    INSERT INTO flow_counts AS f (queue, leased, ck_reserved, ck_leased, ck_at)
    SELECT $1, bump.k, n.n, 0, $6::bigint FROM n, bump WHERE $4::boolean
    ON CONFLICT (queue) DO UPDATE SET
        leased = f.leased + EXCLUDED.leased,
        ck_reserved = CASE WHEN (SELECT counted FROM n) THEN EXCLUDED.ck_reserved ELSE f.ck_reserved END,
        ck_leased = CASE WHEN (SELECT counted FROM n) THEN f.leased ELSE f.ck_leased END,
        ck_at = CASE WHEN (SELECT counted FROM n) THEN EXCLUDED.ck_at ELSE f.ck_at END
)
SELECT (SELECT n FROM n) AS reserved, (SELECT count(*) FROM b) AS buckets, (SELECT tokens FROM b) AS tokens,
    (SELECT updated_at FROM b) AS updated_at,
    p.seq, p.size
FROM (VALUES (1)) AS v(one) LEFT JOIN picked p ON true
ORDER BY p.priority DESC, p.run_at, p.seq;

-- name: flow_forget_lock
-- A queue's settings changed or the queue is deleted (flow.forget): take its flow lock
-- ($1 the queue; the key of promote_due_locking) for the rest of the transaction, so no
-- Reserve of the queue is between its flow_ready and its commit while flow_forget runs.
SELECT pg_advisory_xact_lock(hashtextextended('sepp.flow/' || current_schema() || '/' || $1::text, 0));

-- name: flow_forget
-- Drop queue $1's bound (migration 0007), in a statement after flow_forget_lock (its
-- snapshot then sees what every earlier holder of the lock committed): the next limited
-- Reserve counts exactly. A bound holds only while every lease of the queue goes through
-- it, and leases made while the queue was unlimited (or rate-limited only) did not.
DELETE FROM flow_counts WHERE queue = $1::text;

-- name: bucket_ensure
-- Flow control: create the token bucket of queue $1, full ($2 tokens) at $3
-- (µs), unless it exists; a second node creating it at once waits for the first and
-- leaves its row alone (so no bucket is ever handed out twice at full).
INSERT INTO flow_buckets (queue, tokens, updated_at) VALUES ($1, $2, $3) ON CONFLICT (queue) DO NOTHING;

-- name: lease_seqs_spend
-- lease_seqs ($1 seqs, $2 lease id, $3 expiry, $4 worker, $5 now, $6 node) that also
-- stores the token bucket of queue $7 (its row locked by flow_ready): $8 tokens, less one
-- per job leased, at $9 (µs). One statement, as lease_seqs.
WITH leased AS (
    UPDATE jobs j SET state = 3, attempt = j.attempt + 1, lease_id = $2, lease_expires_at = $3, worker_id = $4,
        started_at = $5, cancel_requested = 0, node = $6
    WHERE j.seq = ANY($1::bigint[]) AND j.state::integer = 2
    RETURNING j.id, j.job_type, j.priority, j.run_at, j.enqueued_at, j.attempt, j.max_attempts,
        coalesce(j.payload, '\x'::bytea) AS payload, j.encoding, j.extras, j.idempotency_key, j.history, j.seq
), put AS (
    UPDATE flow_buckets SET tokens = $8::double precision - (SELECT count(*) FROM leased), updated_at = $9::bigint
    WHERE queue = $7
)
SELECT * FROM leased;

-- name: reserved_extras_in
-- Flow control (per-key limit): the extras (custom map) of queue $1's RESERVED
-- jobs; the caller holds the queue's flow lock.
SELECT extras FROM jobs WHERE queue = $1 AND state = 3;

-- name: ready_keys
-- Flow control (per-key limit): the first $2 READY jobs of queue $1 in reserve
-- order with their extras and size (payload + history bytes), read through a cursor for
-- flow_keys.Picker. Not locked: every reserver of the queue holds its flow lock, and
-- lease_seqs leases only rows still READY.
SELECT seq, extras, octet_length(coalesce(payload, '\x'::bytea)) + coalesce(octet_length(history), 0)
FROM jobs WHERE queue = $1 AND state = 2 ORDER BY priority DESC, run_at, seq LIMIT $2;

-- name: job_outcomes
-- What a wait for jobs reads of each id of $1 (domain.outcomes.JobOutcome, by name): each probed
-- through jobs_pkey at the seq it carries, after jobs_id_foreign (as get_job); the history only
-- of a finished job; its result (stored with the completing ack) in the last two columns.
SELECT j.id, j.queue, j.job_type, j.state, j.attempt, j.finished_at, j.reason,
    CASE WHEN j.state IN (4, 5, 6) THEN j.history END AS history, j.worker_id, j.node, j.started_at,
    j.result, j.result_encoding
FROM unnest($1::bytea[]) AS v(jid)
CROSS JOIN LATERAL (
    SELECT * FROM jobs
    WHERE seq = coalesce((SELECT f.seq FROM jobs f WHERE f.id = v.jid AND job_id_foreign(f.id, f.seq)), job_seq_hint(v.jid))
        AND id = v.jid
    OFFSET 0
) j;

-- name: dep_lookup
-- Dependencies named at enqueue (docs/workflows.md): id, seq and state of each stored one of
-- the ids $1 (an id of no job is left out).
SELECT j.id, j.seq, j.state FROM unnest($1::bytea[]) AS u(id)
JOIN jobs j ON j.seq = coalesce((SELECT f.seq FROM jobs f WHERE f.id = u.id AND job_id_foreign(f.id, f.seq)),
                                job_seq_hint(u.id)) AND j.id = u.id;

-- name: mark_dependencies
-- Lock the dependencies of seqs $1 and mark the unfinished ones (their completion then
-- releases their dependents: jobs_release); returns those, as of after any concurrent
-- completion of them committed (the UPDATE waits for its row lock, then reads the row again).
UPDATE jobs SET has_dependents = true WHERE seq = ANY($1::bigint[]) AND state <> 4 RETURNING seq, state, purge_at;

-- name: defer_job
-- A job just inserted with dependencies: $1 seq, $2 how many are unfinished (DEFERRED when
-- any), $3 its depends_on column (the ids in order), $4 its failure policy (on_dep_fail).
UPDATE jobs SET state = CASE WHEN $2 > 0 THEN 7 ELSE state END, deps_left = $2, depends_on = $3, on_dep_fail = $4
WHERE seq = $1;

-- name: cancel_at_enqueue
-- A job enqueued with the "cancel" policy and an already failed dependency: $1 seq,
-- $2 finished_at, $3 purge_at, $4 reason, $5 the dependency's seq.
UPDATE jobs SET state = 6, finished_at = $2, purge_at = $3, reason = $4, dep_failed_by = $5 WHERE seq = $1;

-- name: insert_waits
-- The edges of job seq $2: one per unfinished dependency seq of $1.
INSERT INTO job_waits (parent_seq, child_seq) SELECT p, $2 FROM unnest($1::bigint[]) AS p ON CONFLICT DO NOTHING;

-- name: jobs_in_seq_blocks
-- The jobs an enqueue through the SQL functions stored (sql_notices): those in the blocks of
-- seqs [$1[i], $1[i] + $2[i]), in seq order, with what their live `enqueued` events name.
-- Each block probes jobs_pkey by range (a block's deduplicated seqs have no row).
SELECT j.id, j.queue, j.job_type, j.run_at, j.enqueued_at
FROM unnest($1::bigint[], $2::bigint[]) AS b(first, n)
JOIN jobs j ON j.seq >= b.first AND j.seq < b.first + b.n
ORDER BY j.seq;
