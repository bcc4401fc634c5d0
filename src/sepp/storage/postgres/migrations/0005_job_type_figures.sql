-- sepp PostgreSQL schema, version 4: the job-type figures (as SQLite's
-- migration 0006, sepp.storage.type_figures). Every node adds its in-memory counts to the
-- same rows (INSERT … ON CONFLICT DO UPDATE SET n = n + excluded.n, run_max with GREATEST),
-- so a read shows the whole cluster. Minute rows (step 1) serve the last hour and are kept
-- two hours, hour rows (step 60) the last 24 hours and are kept 25 hours (the (step, minute) index).
CREATE TABLE job_type_figures (
    queue          text NOT NULL,
    step           integer NOT NULL,          -- 1: a minute row; 60: an hour row (minute = its first)
    minute         bigint NOT NULL,           -- µs / 60,000,000
    job_type       text NOT NULL,
    completed      bigint NOT NULL DEFAULT 0,
    retried        bigint NOT NULL DEFAULT 0,
    dead_lettered  bigint NOT NULL DEFAULT 0,
    runs           bigint NOT NULL DEFAULT 0,
    run_max        bigint NOT NULL DEFAULT 0, -- µs
    PRIMARY KEY (queue, step, minute, job_type)
);
CREATE INDEX job_type_figures_age ON job_type_figures (step, minute);

CREATE TABLE job_type_runtimes (
    queue     text NOT NULL,
    step      integer NOT NULL,
    minute    bigint NOT NULL,
    job_type  text NOT NULL,
    bucket    integer NOT NULL,               -- sepp.server.admin.type_figures.bucket_of
    n         bigint NOT NULL DEFAULT 0,
    PRIMARY KEY (queue, step, minute, job_type, bucket)
);
CREATE INDEX job_type_runtimes_age ON job_type_runtimes (step, minute);
