-- sepp SQLite schema, version 6: the job-type figures (sepp.storage.type_figures).
-- Per (queue, job_type, minute or hour): completed / retried / dead-lettered counts, how many
-- attempts had a run time (reserve → settle) and the longest (µs); and per run-time bucket
-- how many runs fell into it. The server counts in memory and adds its counts every few
-- seconds. Each count goes into a minute row (step 1, kept two hours: the last-hour window)
-- and into its hour's row (step 60, kept 25 hours: the 24-hour window); older rows are
-- dropped (the (step, minute) index).
CREATE TABLE job_type_figures (
    queue          TEXT NOT NULL,
    step           INTEGER NOT NULL,          -- 1: a minute row; 60: an hour row (minute = its first)
    minute         INTEGER NOT NULL,          -- µs / 60,000,000
    job_type       TEXT NOT NULL,
    completed      INTEGER NOT NULL DEFAULT 0,
    retried        INTEGER NOT NULL DEFAULT 0,
    dead_lettered  INTEGER NOT NULL DEFAULT 0,
    runs           INTEGER NOT NULL DEFAULT 0,
    run_max        INTEGER NOT NULL DEFAULT 0, -- µs
    PRIMARY KEY (queue, step, minute, job_type)
) WITHOUT ROWID;
CREATE INDEX job_type_figures_age ON job_type_figures (step, minute);

CREATE TABLE job_type_runtimes (
    queue     TEXT NOT NULL,
    step      INTEGER NOT NULL,
    minute    INTEGER NOT NULL,
    job_type  TEXT NOT NULL,
    bucket    INTEGER NOT NULL,               -- sepp.server.admin.type_figures.bucket_of
    n         INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (queue, step, minute, job_type, bucket)
) WITHOUT ROWID;
CREATE INDEX job_type_runtimes_age ON job_type_runtimes (step, minute);
