-- sepp PostgreSQL schema, version 3: the job-type figures (issue 13 item 2; as SQLite's
-- migration 0005, sepp.storage.type_figures). Every node adds its in-memory counts to the
-- same rows (INSERT … ON CONFLICT DO UPDATE SET n = n + excluded.n, run_max with GREATEST),
-- so a read shows the whole cluster. Rows older than a day are dropped (minute index).
CREATE TABLE job_type_figures (
    queue          text NOT NULL,
    minute         bigint NOT NULL,           -- µs / 60,000,000
    job_type       text NOT NULL,
    completed      bigint NOT NULL DEFAULT 0,
    retried        bigint NOT NULL DEFAULT 0,
    dead_lettered  bigint NOT NULL DEFAULT 0,
    runs           bigint NOT NULL DEFAULT 0,
    run_max        bigint NOT NULL DEFAULT 0, -- µs
    PRIMARY KEY (queue, minute, job_type)
);
CREATE INDEX job_type_figures_minute ON job_type_figures (minute);

CREATE TABLE job_type_runtimes (
    queue     text NOT NULL,
    minute    bigint NOT NULL,
    job_type  text NOT NULL,
    bucket    integer NOT NULL,               -- sepp.server.admin.type_figures.bucket_of
    n         bigint NOT NULL DEFAULT 0,
    PRIMARY KEY (queue, minute, job_type, bucket)
);
CREATE INDEX job_type_runtimes_minute ON job_type_runtimes (minute);
