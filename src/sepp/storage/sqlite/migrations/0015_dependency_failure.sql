-- sepp SQLite schema, version 15: what a failed dependency does (docs/workflows.md "When a
-- dependency fails"; PostgreSQL's migration 0017).
--   on_dep_fail     the job's policy when a dependency is dead-lettered or cancelled:
--                   0 cancel (the default), 1 run, 2 wait;
--   dep_failed_by   of a job CANCELLED because a dependency failed: that dependency's seq
--                   (a redrive of it revives the job); NULL otherwise.
-- dep_failed lists the dependencies that became DEAD_LETTERED or CANCELLED in this
-- transaction while some job waited for them; the writer drains it in the same transaction
-- (ops.propagate_failures: cancel / release the dependents, level by level).
ALTER TABLE jobs ADD COLUMN on_dep_fail INTEGER NOT NULL DEFAULT 0;
ALTER TABLE jobs ADD COLUMN dep_failed_by INTEGER;
CREATE INDEX jobs_dep_failed_by ON jobs (dep_failed_by) WHERE dep_failed_by IS NOT NULL;

CREATE TABLE dep_failed (seq INTEGER NOT NULL, id BLOB, state INTEGER, finished_at INTEGER, purge_at INTEGER);

CREATE TRIGGER jobs_dep_failed AFTER UPDATE OF state ON jobs
WHEN NEW.state IN (5, 6) AND OLD.state NOT IN (5, 6) AND NEW.has_dependents = 1
BEGIN
    INSERT INTO dep_failed (seq, id, state, finished_at, purge_at)
    VALUES (NEW.seq, NEW.id, NEW.state, NEW.finished_at, NEW.purge_at);
END;

-- The release counts every completed dependency, whatever state the dependent is in (a
-- dependent CANCELLED because of another dependency keeps its count right for its revival):
-- deps_left is always the number of its job_waits edges. Only a DEFERRED one changes state.
DROP TRIGGER jobs_release;
CREATE TRIGGER jobs_release AFTER UPDATE OF state ON jobs
WHEN NEW.state = 4 AND OLD.state <> 4 AND NEW.has_dependents = 1
BEGIN
    UPDATE jobs SET deps_left = deps_left - 1,
        state = CASE WHEN state <> 7 THEN state WHEN deps_left > 1 THEN 7 WHEN run_at > NEW.finished_at THEN 1
                     ELSE 2 END
    WHERE seq IN (SELECT child_seq FROM job_waits WHERE parent_seq = NEW.seq);
    INSERT INTO dep_wakes (queue)
    SELECT queue FROM jobs WHERE seq IN (SELECT child_seq FROM job_waits WHERE parent_seq = NEW.seq) AND state = 2;
    DELETE FROM job_waits WHERE parent_seq = NEW.seq;
END;
