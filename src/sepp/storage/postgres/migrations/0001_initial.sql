-- sepp PostgreSQL schema, version 1: the same tables as the SQLite schema (versions 1-3),
-- in the schema named by [postgres] schema (default "sepp"; the search_path of every
-- connection). Times are bigint microseconds since the Unix epoch (UTC); ids 16-byte
-- UUIDv7 bytea. States: 1 SCHEDULED, 2 READY, 3 RESERVED, 4 COMPLETED, 5 DEAD_LETTERED,
-- 6 CANCELLED.

CREATE TABLE queues (
    name        text PRIMARY KEY,
    settings    text NOT NULL,                 -- QueueSettings as JSON
    paused      boolean NOT NULL DEFAULT false,
    declared    boolean NOT NULL DEFAULT false, -- false = created on first enqueue
    created_at  bigint NOT NULL,
    updated_at  bigint NOT NULL
);

CREATE TABLE jobs (
    seq               bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,  -- enqueue order (FIFO tie-break)
    id                bytea NOT NULL UNIQUE,
    queue             text NOT NULL,
    job_type          text NOT NULL,
    state             smallint NOT NULL,
    priority          integer NOT NULL,
    run_at            bigint NOT NULL,       -- when it becomes (or became) reservable
    enqueued_at       bigint NOT NULL,
    attempt           integer NOT NULL DEFAULT 0,
    max_attempts      integer NOT NULL,
    payload           bytea,
    encoding          text NOT NULL DEFAULT '',
    extras            bytea,                 -- custom map + trace context, protobuf-encoded; NULL if both empty
    idempotency_key   text,
    lease_id          bytea,                 -- current (or last) lease; kept after settle for idempotent re-acks
    lease_expires_at  bigint,
    worker_id         text,
    node              text,                  -- the node that leased it (node_name), named in history
    started_at        bigint,                -- start of the current/last attempt
    history           text,                  -- JSON array of finished attempts (compact, as SQLite writes it)
    finished_at       bigint,
    purge_at          bigint,                -- finished_at + the queue's retention
    reason            text,                  -- dead-letter / cancel reason
    cancel_requested  smallint NOT NULL DEFAULT 0
);
-- Jobs change state many times: leave room on each page for HOT updates.
ALTER TABLE jobs SET (fillfactor = 80);

-- Reserve: best priority, then run_at, then enqueue order.
CREATE INDEX jobs_ready ON jobs (queue, priority DESC, run_at, seq) WHERE state = 2;
-- Promotion sweep and next-due lookup.
CREATE INDEX jobs_scheduled ON jobs (run_at) WHERE state = 1;
-- Lease expiry sweep.
CREATE INDEX jobs_leased ON jobs (lease_expires_at) WHERE state = 3;
-- Retention sweep.
CREATE INDEX jobs_purge ON jobs (purge_at) WHERE purge_at IS NOT NULL;
-- Finished-state listings, counts and the bulk redrive filter (as SQLite's migration 0002).
CREATE INDEX jobs_finished ON jobs (state, queue, finished_at, seq) WHERE state >= 4;

-- Idempotency keys: the primary key is what makes a key exactly-once across nodes
-- (INSERT … ON CONFLICT, never read-then-write).
CREATE TABLE idempotency (
    queue       text NOT NULL,
    key         text NOT NULL,
    job_id      bytea NOT NULL,
    expires_at  bigint NOT NULL,            -- original enqueue time + the queue's dedup window
    PRIMARY KEY (queue, key)
);
CREATE INDEX idempotency_expiry ON idempotency (expires_at);

-- Per-queue, per-minute throughput for the dashboards; every node adds its in-memory
-- counts (INSERT … ON CONFLICT DO UPDATE SET x = x + excluded.x).
CREATE TABLE queue_throughput (
    queue          text NOT NULL,
    minute         bigint NOT NULL,          -- µs / 60,000,000
    enqueued       bigint NOT NULL DEFAULT 0,
    completed      bigint NOT NULL DEFAULT 0,
    dead_lettered  bigint NOT NULL DEFAULT 0,
    PRIMARY KEY (queue, minute)
);

-- The nodes of the cluster: each running server upserts its row every few seconds.
CREATE TABLE nodes (
    name        text PRIMARY KEY,
    address     text NOT NULL DEFAULT '',
    version     text NOT NULL DEFAULT '',
    started_at  bigint NOT NULL,             -- µs UTC
    last_seen   bigint NOT NULL              -- µs UTC
);
