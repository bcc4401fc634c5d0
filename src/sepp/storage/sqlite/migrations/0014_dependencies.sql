-- sepp SQLite schema, version 14: dependencies between jobs (docs/workflows.md; PostgreSQL's
-- migration 0016). State 7 is DEFERRED: a job waiting for the jobs it depends on.
--   deps_left       how many of its dependencies are not COMPLETED yet (0 for every other job);
--   has_dependents  1 once a job was named as an unfinished dependency (its completion then
--                   releases its dependents; 0 keeps the completion of every other job free);
--   depends_on      the ids it was enqueued with, 16 bytes each, in the order given (NULL: none);
--   workflow_id     the workflow it belongs to (16 bytes; NULL: none; filled by later steps).
-- job_waits holds one edge per (unfinished dependency, dependent), by seq, deleted when the
-- dependency completes: a completion reads only its own edges (jobs_release), never a scan of
-- the dependents. dep_wakes lists the queues a release made jobs READY in; the writer drains it
-- in the settle's own transaction to wake that queue's long polls.
ALTER TABLE jobs ADD COLUMN deps_left INTEGER NOT NULL DEFAULT 0;
ALTER TABLE jobs ADD COLUMN has_dependents INTEGER NOT NULL DEFAULT 0;
ALTER TABLE jobs ADD COLUMN depends_on BLOB;
ALTER TABLE jobs ADD COLUMN workflow_id BLOB;

CREATE TABLE job_waits (
    parent_seq  INTEGER NOT NULL,
    child_seq   INTEGER NOT NULL,
    PRIMARY KEY (parent_seq, child_seq)
) WITHOUT ROWID;
CREATE INDEX job_waits_child ON job_waits (child_seq);

CREATE TABLE dep_wakes (queue TEXT NOT NULL);

CREATE INDEX jobs_deferred ON jobs (queue) WHERE state = 7;

-- The release, in the statement that completes a dependency (any path: a batched ack, one
-- ack). Each dependent still DEFERRED loses one unfinished dependency; at the last it becomes
-- READY, or SCHEDULED when its run_at is after the completion. The edges are then gone, so a
-- completion releases a dependent at most once.
CREATE TRIGGER jobs_release AFTER UPDATE OF state ON jobs
WHEN NEW.state = 4 AND OLD.state <> 4 AND NEW.has_dependents = 1
BEGIN
    UPDATE jobs SET deps_left = deps_left - 1,
        state = CASE WHEN deps_left > 1 THEN 7 WHEN run_at > NEW.finished_at THEN 1 ELSE 2 END
    WHERE seq IN (SELECT child_seq FROM job_waits WHERE parent_seq = NEW.seq) AND state = 7;
    INSERT INTO dep_wakes (queue)
    SELECT queue FROM jobs WHERE seq IN (SELECT child_seq FROM job_waits WHERE parent_seq = NEW.seq) AND state = 2;
    DELETE FROM job_waits WHERE parent_seq = NEW.seq;
END;
