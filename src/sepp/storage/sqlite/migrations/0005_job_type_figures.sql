-- sepp SQLite schema, version 5: the job-type figures (issue 13 item 2; sepp.storage.type_figures).
-- Per (queue, job_type, minute): completed / retried / dead-lettered counts, how many
-- attempts had a run time (reserve → settle) and the longest (µs); and per run-time bucket
-- how many runs fell into it. The server counts in memory and adds its counts every few
-- seconds; rows older than a day are dropped (minute index).
CREATE TABLE job_type_figures (
    queue          TEXT NOT NULL,
    minute         INTEGER NOT NULL,          -- µs / 60,000,000
    job_type       TEXT NOT NULL,
    completed      INTEGER NOT NULL DEFAULT 0,
    retried        INTEGER NOT NULL DEFAULT 0,
    dead_lettered  INTEGER NOT NULL DEFAULT 0,
    runs           INTEGER NOT NULL DEFAULT 0,
    run_max        INTEGER NOT NULL DEFAULT 0, -- µs
    PRIMARY KEY (queue, minute, job_type)
) WITHOUT ROWID;
CREATE INDEX job_type_figures_minute ON job_type_figures (minute);

CREATE TABLE job_type_runtimes (
    queue     TEXT NOT NULL,
    minute    INTEGER NOT NULL,
    job_type  TEXT NOT NULL,
    bucket    INTEGER NOT NULL,               -- sepp.server.admin.type_figures.bucket_of
    n         INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (queue, minute, job_type, bucket)
) WITHOUT ROWID;
CREATE INDEX job_type_runtimes_minute ON job_type_runtimes (minute);
