-- sepp PostgreSQL schema, version 3: periodic schedules, shared by every node.
-- One row per schedule: its definition (JSON text, sepp.server.periodic.spec) and its state
-- — paused, the latest tick a job was enqueued for, the last run and the job it produced.
-- Times bigint µs UTC.
CREATE TABLE periodic (
    name          text PRIMARY KEY,
    definition    text NOT NULL,
    source        text NOT NULL,
    paused        boolean NOT NULL DEFAULT false,
    active_since  bigint NOT NULL,
    last_tick     bigint NOT NULL DEFAULT 0,
    last_run_at   bigint NOT NULL DEFAULT 0,
    last_job_id   bytea NOT NULL DEFAULT '\x',
    last_error    text NOT NULL DEFAULT '',
    updated_at    bigint NOT NULL
);
