-- sepp PostgreSQL schema, version 2: the workers each node saw (the Workers page).
-- Each node replaces its own rows with every heartbeat (Store.report_workers); a row not
-- seen for an hour is forgotten by whichever node reports next. Times bigint µs UTC.
CREATE TABLE workers (
    worker_id         text NOT NULL,
    node              text NOT NULL,
    host              text NOT NULL DEFAULT '',
    queues            text[] NOT NULL DEFAULT '{}',
    concurrency       integer NOT NULL DEFAULT 0,
    client_version    text NOT NULL DEFAULT '',
    first_seen        bigint NOT NULL,
    last_reserve      bigint NOT NULL,
    last_seen         bigint NOT NULL,
    completed_minute  bigint NOT NULL DEFAULT 0,
    failed_minute     bigint NOT NULL DEFAULT 0,
    PRIMARY KEY (worker_id, node)
);
CREATE INDEX workers_last_seen ON workers (last_seen);
