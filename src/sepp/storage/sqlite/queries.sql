-- Named queries of the SQLite backend. Times in µs UTC, ids 16-byte blobs.

-- name: insert_job
INSERT INTO jobs (id, queue, job_type, state, priority, run_at, enqueued_at, max_attempts,
                  payload, encoding, extras, idempotency_key)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?);

-- name: find_idempotency
SELECT job_id, expires_at FROM idempotency WHERE queue = ? AND key = ?;

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

-- name: load_queues
SELECT name, settings, paused, declared FROM queues ORDER BY name;

-- name: promote_due
UPDATE jobs SET state = 2
WHERE seq IN (SELECT seq FROM jobs WHERE state = 1 AND run_at <= ? ORDER BY run_at LIMIT ?)
RETURNING queue;

-- name: next_due
SELECT min(run_at) FROM jobs WHERE state = 1;

-- name: ready_jobs
SELECT seq FROM jobs WHERE queue = ? AND state = 2 ORDER BY priority DESC, run_at, seq LIMIT ?;

-- name: lease_ready
-- One statement leases up to ?5 READY jobs of queue ?4, each under a fresh random 128-bit
-- lease id (the fencing token). RETURNING order is unspecified: the caller sorts by
-- priority DESC, run_at, seq.
UPDATE jobs SET state = 3, attempt = attempt + 1, lease_id = randomblob(16), lease_expires_at = ?1,
    worker_id = ?2, started_at = ?3, cancel_requested = 0
WHERE seq IN (SELECT seq FROM jobs WHERE queue = ?4 AND state = 2 ORDER BY priority DESC, run_at, seq LIMIT ?5)
RETURNING seq, id, queue, job_type, state, priority, run_at, enqueued_at, attempt, max_attempts, payload,
    encoding, extras, idempotency_key, lease_id, lease_expires_at, worker_id, started_at, history,
    finished_at, reason, cancel_requested;

-- name: ack_many_head
-- Acks of live leases in one statement; ?1 = now, ?2 = completed retention (µs); the
-- (job id, lease id) pairs follow as a VALUES list from ?3 on. Returns what it completed.
UPDATE jobs SET state = 4, finished_at = ?1, purge_at = ?1 + ?2,
    history = json_insert(coalesce(history, '[]'), '$[#]', json_object(
        'attempt', attempt, 'worker_id', coalesce(worker_id, ''), 'started_at', started_at, 'ended_at', ?1,
        'outcome', 'completed', 'error_message', '', 'error_detail', ''))
FROM (SELECT column1 AS jid, column2 AS lid FROM (VALUES {values})) AS v
WHERE jobs.id = v.jid AND jobs.lease_id = v.lid AND jobs.state = 3 AND jobs.lease_expires_at > ?1
RETURNING jobs.id, jobs.queue, jobs.attempt, jobs.seq;

-- name: set_purge_at
UPDATE jobs SET purge_at = ? WHERE seq = ?;

-- name: get_job
SELECT seq, id, queue, job_type, state, priority, run_at, enqueued_at, attempt, max_attempts, payload,
    encoding, extras, idempotency_key, lease_id, lease_expires_at, worker_id, started_at, history,
    finished_at, reason, cancel_requested
FROM jobs WHERE id = ?;

-- name: settle_lookup
SELECT seq, queue, state, lease_id, lease_expires_at, attempt, max_attempts, worker_id, started_at, cancel_requested,
    run_at
FROM jobs WHERE id = ?;

-- name: settle_update
UPDATE jobs SET state = ?, run_at = ?, attempt = ?, finished_at = ?, purge_at = ?, reason = ?,
    history = json_insert(coalesce(history, '[]'), '$[#]', json(?))
WHERE seq = ?;

-- name: extend_lease
UPDATE jobs SET lease_expires_at = ? WHERE seq = ?;

-- name: expired_leases
SELECT seq, queue, attempt, max_attempts, worker_id, started_at, lease_expires_at, cancel_requested
FROM jobs WHERE state = 3 AND lease_expires_at <= ? ORDER BY lease_expires_at LIMIT ?;

-- name: prune_jobs
DELETE FROM jobs WHERE seq IN (SELECT seq FROM jobs WHERE purge_at <= ? LIMIT ?);

-- name: prune_idempotency
DELETE FROM idempotency WHERE (queue, key) IN (SELECT queue, key FROM idempotency WHERE expires_at <= ? LIMIT ?);
