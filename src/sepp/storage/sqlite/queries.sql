-- Named queries of the SQLite backend. Times in µs UTC, ids 16-byte blobs.

-- name: insert_job
INSERT INTO jobs (id, queue, job_type, state, priority, run_at, enqueued_at, max_attempts,
                  payload, encoding, extras, idempotency_key)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?);

-- name: find_idempotency
SELECT job_id, expires_at FROM idempotency WHERE queue = ? AND key = ?;

-- name: insert_custom
-- One custom-index entry of a job just inserted (migration 0006): ?1 the
-- job id, ?2 the key, ?3 the value as text.
INSERT INTO job_custom (seq, key, value) SELECT seq, ?2, ?3 FROM jobs WHERE id = ?1;

-- name: claim_idempotency
INSERT OR REPLACE INTO idempotency (queue, key, job_id, expires_at) VALUES (?, ?, ?, ?);

-- name: job_state
SELECT state FROM jobs WHERE id = ?;

-- name: insert_queue_if_absent
INSERT OR IGNORE INTO queues (name, settings, paused, declared, created_at, updated_at)
VALUES (?, ?, ?, ?, ?, ?);

-- name: upsert_queue
INSERT INTO queues (name, settings, paused, declared, created_at, updated_at)
VALUES (?, ?, ?, ?, ?, ?)
ON CONFLICT (name) DO UPDATE SET settings = excluded.settings, paused = excluded.paused,
    declared = excluded.declared, updated_at = excluded.updated_at;

-- name: get_queue
SELECT name, settings, paused, declared FROM queues WHERE name = ?;

-- name: update_queue_if
-- Store.change_queue: ?1 name, ?2-?4 the new settings/paused/declared, ?5 now, ?6-?8 the row
-- the change was made over (written only when it is still what is stored).
UPDATE queues SET settings = ?2, paused = ?3, declared = ?4, updated_at = ?5
WHERE name = ?1 AND settings = ?6 AND paused = ?7 AND declared = ?8;

-- name: load_queues
SELECT name, settings, paused, declared FROM queues ORDER BY name;

-- name: promote_due
-- Due SCHEDULED jobs → READY (the sweeper, and every Reserve first), returning what the
-- promotion lag and the live job events name of each job (sepp.domain.params.promotion).
UPDATE jobs SET state = 2
WHERE seq IN (SELECT seq FROM jobs WHERE state = 1 AND run_at <= ? ORDER BY run_at LIMIT ?)
RETURNING queue, run_at, id, job_type, attempt;

-- name: next_due
SELECT min(run_at) FROM jobs WHERE state = 1;

-- name: ready_for_lease
-- The next ?2 READY jobs of queue ?1 in reserve order (priority DESC, run_at, seq): the
-- columns a reservation needs, attempt already counting the delivery. lease_ready then
-- leases exactly these (same ORDER BY and LIMIT, same transaction, sole writer).
SELECT id, job_type, priority, run_at, enqueued_at, attempt + 1 AS attempt, max_attempts,
    coalesce(payload, x'') AS payload, encoding,
    extras, idempotency_key, history, seq
FROM jobs WHERE queue = ?1 AND state = 2 ORDER BY priority DESC, run_at, seq LIMIT ?2;

-- name: lease_ready
-- Lease the jobs ready_for_lease returned: ?1 lease id (one fresh random 128-bit token per
-- Reserve call), ?2 expiry, ?3 worker, ?4 now, ?5 queue, ?6 how many, ?7 the leasing node.
UPDATE jobs SET state = 3, attempt = attempt + 1, lease_id = ?1, lease_expires_at = ?2, worker_id = ?3,
    started_at = ?4, cancel_requested = 0, node = ?7
WHERE seq IN (SELECT seq FROM jobs WHERE queue = ?5 AND state = 2 ORDER BY priority DESC, run_at, seq LIMIT ?6);

-- name: bury_damaged
-- A READY job whose row cannot be delivered: ?1 now, ?2 reason, ?3 seq. No
-- purge time (kept until an admin deletes or requeues it); history untouched.
UPDATE jobs SET state = 5, finished_at = ?1, purge_at = NULL, reason = ?2 WHERE seq = ?3 AND state = 2;

-- name: bury_leased
-- The same for a just-leased job the server could not convert: ?3 job id, ?4 its lease id.
UPDATE jobs SET state = 5, finished_at = ?1, purge_at = NULL, reason = ?2
WHERE id = ?3 AND lease_id = ?4 AND state = 3;

-- name: ack_many_head
-- Acks of live leases in one statement; ?1 = now, ?2 = completed retention (µs); the
-- (job id, lease id) pairs follow as a VALUES list from ?3 on. Returns what it completed.
-- The completing attempt is not appended to history: it is implicit in attempt,
-- worker_id, started_at and finished_at (JobRecord.attempt_entries).
UPDATE jobs SET state = 4, finished_at = ?1, purge_at = ?1 + ?2
FROM (SELECT column1 AS jid, column2 AS lid FROM (VALUES {values})) AS v
WHERE jobs.id = v.jid AND jobs.lease_id = v.lid AND jobs.state = 3 AND jobs.lease_expires_at > ?1
RETURNING jobs.id, jobs.queue, jobs.attempt, jobs.seq, jobs.started_at, jobs.job_type;

-- name: ack_many_results_head
-- ack_many_head for acks of which some carry a result: the VALUES list holds (job id, lease
-- id, result, its encoding) from ?3 on (NULL, NULL for an ack without one), and each job's
-- result is written by the same statement as its completion. The acks of a Settle that carry
-- no result use ack_many_head, which binds and writes nothing more.
UPDATE jobs SET state = 4, finished_at = ?1, purge_at = ?1 + ?2, result = v.res, result_encoding = v.enc
FROM (SELECT column1 AS jid, column2 AS lid, column3 AS res, column4 AS enc FROM (VALUES {values})) AS v
WHERE jobs.id = v.jid AND jobs.lease_id = v.lid AND jobs.state = 3 AND jobs.lease_expires_at > ?1
RETURNING jobs.id, jobs.queue, jobs.attempt, jobs.seq, jobs.started_at, jobs.job_type;

-- name: set_purge_at
UPDATE jobs SET purge_at = ? WHERE seq = ?;

-- name: get_job
SELECT id, queue, job_type, state, priority, run_at, enqueued_at, attempt, max_attempts,
    coalesce(payload, x'') AS payload,
    encoding, extras, idempotency_key, lease_id, lease_expires_at, worker_id, started_at, history,
    finished_at, reason, cancel_requested, seq, node, result, result_encoding, progress
FROM jobs WHERE id = ?;

-- name: settle_lookup
SELECT seq, queue, state, lease_id, lease_expires_at, attempt, max_attempts, worker_id, started_at, cancel_requested,
    run_at, node, job_type
FROM jobs WHERE id = ?;

-- name: settle_update
-- Apply a transition (sepp.domain.transitions.Decision) to a job under its lease guard
-- (river's JobSetStateIfRunning): ?1 state, ?2 run_at, ?3 attempt, ?4 finished_at,
-- ?5 purge_at, ?6 reason, ?7 the history entry appended (JSON text), ?8 seq, ?9 lease id.
UPDATE jobs SET state = ?, run_at = ?, attempt = ?, finished_at = ?, purge_at = ?, reason = ?,
    history = json_insert(coalesce(history, '[]'), '$[#]', json(?))
WHERE seq = ? AND lease_id IS ? AND state = 3;

-- name: reclaim_ready
-- A reclaimed lease back to READY (Decision with run_at None): ?1 state, ?2 the history
-- entry; run_at, attempt and the other columns kept. Guarded like settle_update: ?3 seq, ?4 lease id.
UPDATE jobs SET state = ?, history = json_insert(coalesce(history, '[]'), '$[#]', json(?))
WHERE seq = ? AND lease_id IS ? AND state = 3;

-- name: complete_one
-- One ack of a live lease (the completing attempt stays implicit, as in ack_many_head).
-- ?1 finished_at, ?2 purge_at; guarded like settle_update: ?3 seq, ?4 lease id; ?5 the
-- result and ?6 its encoding (NULL, NULL: none).
UPDATE jobs SET state = 4, finished_at = ?1, purge_at = ?2, reason = NULL, result = ?5, result_encoding = ?6
WHERE seq = ?3 AND lease_id IS ?4 AND state = 3;

-- name: extend_lease
UPDATE jobs SET lease_expires_at = ? WHERE seq = ?;

-- name: extend_lease_progress
-- An extension that carries the handler's progress (JSON text): ?1 expiry, ?2 progress, ?3 seq.
UPDATE jobs SET lease_expires_at = ?, progress = ? WHERE seq = ?;

-- name: expired_leases
-- Up to ?4 expired leases (expiry <= ?1) after the key (?2 expiry, ?3 seq), oldest first: a
-- pass that skipped an unprocessable row goes on past it (keyset, never OFFSET).
-- jobs_leased is (queue, lease_expires_at) WHERE state = 3, seq (the rowid) last (migration
-- 0010): `qs` finds every queue holding a RESERVED job by a skip scan of it (one seek per
-- queue; the stored values are compared as they are, so a damaged name is walked past
-- like any other), each queue gives its ?4 oldest expired leases after the key (one range
-- of the index, in order), and the ?4 oldest of them all are returned.
WITH RECURSIVE qs(q) AS (
    SELECT (SELECT min(queue) FROM jobs INDEXED BY jobs_leased WHERE state = 3)
    UNION ALL
    SELECT (SELECT min(queue) FROM jobs INDEXED BY jobs_leased WHERE state = 3 AND queue > qs.q)
    FROM qs WHERE qs.q IS NOT NULL
)
SELECT j.seq, j.queue, j.attempt, j.max_attempts, j.worker_id, j.started_at, j.lease_expires_at,
    j.cancel_requested, j.node, j.id, j.lease_id, j.job_type
FROM qs JOIN jobs AS j ON j.seq IN (
    SELECT seq FROM jobs INDEXED BY jobs_leased
    WHERE state = 3 AND queue = qs.q AND lease_expires_at <= ?1 AND (lease_expires_at, seq) > (?2, ?3)
    ORDER BY lease_expires_at, seq LIMIT ?4)
ORDER BY j.lease_expires_at, j.seq LIMIT ?4;

-- name: prune_jobs
DELETE FROM jobs WHERE seq IN (SELECT seq FROM jobs WHERE purge_at <= ? LIMIT ?);

-- name: prune_idempotency
DELETE FROM idempotency WHERE (queue, key) IN (SELECT queue, key FROM idempotency WHERE expires_at <= ? LIMIT ?);

-- name: prune_workflow_keys
-- Expired workflow keys (dedup_until ≤ ?1, µs UTC), at most ?2, oldest first (workflow_keys_expiry).
DELETE FROM workflow_keys WHERE idempotency_key IN (
    SELECT idempotency_key FROM workflow_keys WHERE dedup_until <= ?1 ORDER BY dedup_until LIMIT ?2);

-- Row by row, for a sweep whose batch statement failed (one unprocessable row must not stop
-- the others). Each SELECT pages by key after (?2, ?3[, ?4]) in index order.

-- name: due_jobs
SELECT seq, queue, run_at, id FROM jobs WHERE state = 1 AND run_at <= ?1 AND (run_at, seq) > (?2, ?3)
ORDER BY run_at, seq LIMIT ?4;

-- name: promote_one
UPDATE jobs SET state = 2 WHERE seq = ? AND state = 1;

-- name: purgeable_jobs
SELECT seq, queue, purge_at, id FROM jobs WHERE purge_at <= ?1 AND (purge_at, seq) > (?2, ?3)
ORDER BY purge_at, seq LIMIT ?4;

-- name: prune_one
DELETE FROM jobs WHERE seq = ?;

-- name: expired_keys
SELECT queue, key, expires_at, job_id FROM idempotency
WHERE expires_at <= ?1 AND (expires_at, queue, key) > (?2, ?3, ?4)
ORDER BY expires_at, queue, key LIMIT ?5;

-- name: prune_key
DELETE FROM idempotency WHERE queue = ? AND key = ?;

-- name: ping
-- Readiness (Store.ping): the store answers a trivial query.
SELECT 1;

-- name: count_reserved_in
-- Flow control: how many jobs of queue ?1 are RESERVED now (a range of jobs_leased).
SELECT count(*) FROM jobs WHERE queue = ?1 AND state = 3;

-- name: bucket_get
-- Flow control: the token bucket of queue ?1 (tokens, updated_at), if any.
SELECT tokens, updated_at FROM flow_buckets WHERE queue = ?1;

-- name: bucket_put
-- Flow control: store the bucket of queue ?1: ?2 tokens left at ?3 (µs).
INSERT INTO flow_buckets (queue, tokens, updated_at) VALUES (?1, ?2, ?3)
ON CONFLICT (queue) DO UPDATE SET tokens = excluded.tokens, updated_at = excluded.updated_at;

-- name: reserved_extras_in
-- Flow control (per-key limit): the extras (custom map) of queue ?1's RESERVED jobs.
SELECT extras FROM jobs WHERE queue = ?1 AND state = 3;

-- name: ready_keys
-- Flow control (per-key limit): the first ?2 READY jobs of queue ?1 in reserve
-- order with their extras and size (payload + history bytes), for flow_keys.pick.
SELECT seq, extras, length(coalesce(payload, x'')) + coalesce(length(CAST(history AS BLOB)), 0)
FROM jobs WHERE queue = ?1 AND state = 2 ORDER BY priority DESC, run_at, seq LIMIT ?2;

-- name: ready_for_lease_seqs
-- The ready_for_lease columns of the READY jobs whose seqs are the JSON array ?1, in reserve order.
SELECT id, job_type, priority, run_at, enqueued_at, attempt + 1 AS attempt, max_attempts,
    coalesce(payload, x'') AS payload, encoding,
    extras, idempotency_key, history, seq
FROM jobs WHERE seq IN (SELECT value FROM json_each(?1)) AND state = 2 ORDER BY priority DESC, run_at, seq;

-- name: lease_seqs
-- Lease the READY jobs whose seqs are the JSON array ?5: ?1 lease id, ?2 expiry, ?3 worker,
-- ?4 now, ?6 the leasing node (as lease_ready).
UPDATE jobs SET state = 3, attempt = attempt + 1, lease_id = ?1, lease_expires_at = ?2, worker_id = ?3,
    started_at = ?4, cancel_requested = 0, node = ?6
WHERE seq IN (SELECT value FROM json_each(?5)) AND state = 2;

-- name: job_outcomes
-- What a wait for jobs reads of each id (domain.outcomes.JobOutcome, by name): the history only
-- of a finished job. The driver widens the IN list to one parameter per id (outcomes.py).
-- The job's result (stored with the completing ack): the last two columns.
SELECT id, queue, job_type, state, attempt, finished_at, reason,
    CASE WHEN state IN (4, 5, 6) THEN history END AS history, worker_id, node, started_at,
    result, result_encoding
FROM jobs WHERE id IN (?);

-- name: dep_lookup
-- A dependency named at enqueue (docs/workflows.md): its seq and state, by id.
SELECT seq, state, purge_at FROM jobs WHERE id = ?;

-- name: job_seq
SELECT seq FROM jobs WHERE id = ?;

-- name: defer_job
-- A job just inserted with dependencies: ?1 its id, ?2 how many are unfinished (DEFERRED when
-- any), ?3 its depends_on column (the ids in order), ?4 its workflow's id (NULL: keep the one
-- it has). Returns its seq: one statement writes the row once, where a lookup of its seq, an
-- update and a workflow stamp cost three (measured: about 24 µs of writer time per job).
UPDATE jobs SET state = CASE WHEN ?2 > 0 THEN 7 ELSE state END, deps_left = ?2, depends_on = ?3,
    workflow_id = coalesce(?4, workflow_id)
WHERE id = ?1 RETURNING seq;

-- name: mark_dependency
-- An unfinished dependency: its completion now releases its dependents (jobs_release).
UPDATE jobs SET has_dependents = 1 WHERE seq = ? AND has_dependents = 0;

-- name: insert_wait
INSERT OR IGNORE INTO job_waits (parent_seq, child_seq) VALUES (?, ?);

-- name: drain_wakes
-- The queues jobs_release made jobs READY in during this transaction (dep_wakes is empty
-- between transactions: every settle drains it).
DELETE FROM dep_wakes RETURNING queue;

-- name: take_failed
-- The dependencies that failed in this transaction (jobs_dep_failed), taken off the list.
DELETE FROM dep_failed RETURNING seq, id, state, finished_at, purge_at;

-- name: release_run_children
-- Dependents of failed job :seq with the "run" policy: the edge counts as settled; DEFERRED
-- at their last one, they become READY (SCHEDULED for a run_at after :fin).
UPDATE jobs SET deps_left = deps_left - 1,
    state = CASE WHEN state <> 7 THEN state WHEN deps_left > 1 THEN 7 WHEN run_at > :fin THEN 1 ELSE 2 END
WHERE seq IN (SELECT child_seq FROM job_waits WHERE parent_seq = :seq) AND on_dep_fail = 1;

-- name: wake_run_children
INSERT INTO dep_wakes (queue)
SELECT queue FROM jobs WHERE seq IN (SELECT child_seq FROM job_waits WHERE parent_seq = :seq) AND on_dep_fail = 1
    AND state = 2;

-- name: drop_run_edges
DELETE FROM job_waits WHERE parent_seq = :seq
    AND child_seq IN (SELECT seq FROM jobs WHERE on_dep_fail = 1
                      AND seq IN (SELECT child_seq FROM job_waits WHERE parent_seq = :seq));

-- name: cancel_children
-- Dependents of failed job :seq with the "cancel" policy still DEFERRED: CANCELLED naming it
-- (:reason), kept as long as it (:purge); jobs_dep_failed lists those that have dependents.
UPDATE jobs SET state = 6, finished_at = :fin, purge_at = :purge, reason = :reason, dep_failed_by = :seq
WHERE seq IN (SELECT child_seq FROM job_waits WHERE parent_seq = :seq) AND on_dep_fail = 0 AND state = 7;

-- name: set_dep_policy
UPDATE jobs SET on_dep_fail = ?2 WHERE seq = ?1;

-- name: cancel_at_enqueue
-- A job enqueued with the "cancel" policy and an already failed dependency: ?1 seq,
-- ?2 finished_at, ?3 purge_at, ?4 reason, ?5 the dependency's seq.
UPDATE jobs SET state = 6, finished_at = ?2, purge_at = ?3, reason = ?4, dep_failed_by = ?5 WHERE seq = ?1;

-- name: revivable
-- Jobs CANCELLED because dependency :seq failed (cancel_children, cancel_at_enqueue).
SELECT seq FROM jobs WHERE dep_failed_by = :seq AND state = 6;

-- name: other_failed_dependency
-- A dependency job :child still waits for that is DEAD_LETTERED or CANCELLED: seq, id, state, purge_at.
SELECT p.seq, p.id, p.state, p.purge_at FROM job_waits w JOIN jobs p ON p.seq = w.parent_seq
WHERE w.child_seq = :child AND p.state IN (5, 6) LIMIT 1;

-- name: revive_one
-- Back to waiting (DEFERRED; READY when it waits for nothing any more).
UPDATE jobs SET state = CASE WHEN deps_left > 0 THEN 7 ELSE 2 END, finished_at = NULL, purge_at = NULL,
    reason = NULL, dep_failed_by = NULL
WHERE seq = :child AND state = 6;

-- name: wake_revived
-- A revived job that waits for nothing is READY: its queue's long polls are woken after the commit.
INSERT INTO dep_wakes (queue) SELECT queue FROM jobs WHERE seq = :child AND state = 2;

-- name: reblame
-- Still cancelled, now because of another failed dependency (:dep, its reason and purge_at).
UPDATE jobs SET dep_failed_by = :dep, reason = :reason, purge_at = :purge WHERE seq = :child;
