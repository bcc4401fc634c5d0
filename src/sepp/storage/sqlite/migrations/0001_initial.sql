-- sepp SQLite schema, version 1.
-- Times are integer microseconds since the Unix epoch (UTC); ids are 16-byte UUIDv7 blobs.
-- States: 1 SCHEDULED, 2 READY, 3 RESERVED, 4 COMPLETED, 5 DEAD_LETTERED, 6 CANCELLED.

CREATE TABLE queues (
    name        TEXT PRIMARY KEY,
    settings    TEXT NOT NULL,              -- QueueSettings as JSON
    paused      INTEGER NOT NULL DEFAULT 0,
    declared    INTEGER NOT NULL DEFAULT 0, -- 0 = created on first enqueue
    created_at  INTEGER NOT NULL,
    updated_at  INTEGER NOT NULL
) WITHOUT ROWID;

CREATE TABLE jobs (
    seq               INTEGER PRIMARY KEY,  -- enqueue order (FIFO tie-break)
    id                BLOB NOT NULL UNIQUE,
    queue             TEXT NOT NULL,
    job_type          TEXT NOT NULL,
    state             INTEGER NOT NULL,
    priority          INTEGER NOT NULL,
    run_at            INTEGER NOT NULL,     -- when it becomes (or became) reservable
    enqueued_at       INTEGER NOT NULL,
    attempt           INTEGER NOT NULL DEFAULT 0,
    max_attempts      INTEGER NOT NULL,
    payload           BLOB,
    encoding          TEXT NOT NULL DEFAULT '',
    extras            BLOB,                 -- custom map + trace context, protobuf-encoded; NULL if both empty
    idempotency_key   TEXT,
    lease_id          BLOB,                 -- current (or last) lease; kept after settle for idempotent re-acks
    lease_expires_at  INTEGER,
    worker_id         TEXT,
    started_at        INTEGER,              -- start of the current/last attempt
    history           TEXT,                 -- JSON array of finished attempts
    finished_at       INTEGER,
    purge_at          INTEGER,              -- finished_at + the queue's retention
    reason            TEXT,                 -- dead-letter reason
    cancel_requested  INTEGER NOT NULL DEFAULT 0
);

-- Reserve: best priority, then run_at, then enqueue order.
CREATE INDEX jobs_ready ON jobs (queue, priority DESC, run_at, seq) WHERE state = 2;
-- Promotion sweep and next-due lookup.
CREATE INDEX jobs_scheduled ON jobs (run_at) WHERE state = 1;
-- Lease expiry sweep.
CREATE INDEX jobs_leased ON jobs (lease_expires_at) WHERE state = 3;
-- Retention sweep.
CREATE INDEX jobs_purge ON jobs (purge_at) WHERE purge_at IS NOT NULL;

CREATE TABLE idempotency (
    queue       TEXT NOT NULL,
    key         TEXT NOT NULL,
    job_id      BLOB NOT NULL,
    expires_at  INTEGER NOT NULL,           -- original enqueue time + the queue's dedup window
    PRIMARY KEY (queue, key)
) WITHOUT ROWID;

CREATE INDEX idempotency_expiry ON idempotency (expires_at);
