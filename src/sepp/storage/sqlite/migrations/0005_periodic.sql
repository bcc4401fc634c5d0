-- sepp SQLite schema, version 5: periodic schedules. One row per schedule: its
-- definition (JSON text, sepp.server.periodic.spec) and its state — paused, the latest tick a
-- job was enqueued for, the last run and the job it produced. Times integer µs UTC.
CREATE TABLE periodic (
    name          TEXT PRIMARY KEY,
    definition    TEXT NOT NULL,
    source        TEXT NOT NULL,
    paused        INTEGER NOT NULL DEFAULT 0,
    active_since  INTEGER NOT NULL,
    last_tick     INTEGER NOT NULL DEFAULT 0,
    last_run_at   INTEGER NOT NULL DEFAULT 0,
    last_job_id   BLOB NOT NULL DEFAULT x'',
    last_error    TEXT NOT NULL DEFAULT '',
    updated_at    INTEGER NOT NULL
) WITHOUT ROWID;
