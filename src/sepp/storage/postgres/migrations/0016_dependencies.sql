-- sepp PostgreSQL schema, version 16: dependencies between jobs (docs/workflows.md; SQLite's
-- migration 0014). State 7 is DEFERRED: a job waiting for the jobs it depends on.
--   deps_left       how many of its dependencies are not COMPLETED yet (0 for every other job);
--   has_dependents  true once a job was named as an unfinished dependency (its completion then
--                   releases its dependents; false keeps the completion of every other job free);
--   depends_on      the ids it was enqueued with, 16 bytes each, in the order given (NULL: none);
--   workflow_id     the workflow it belongs to (16 bytes; NULL: none; filled by later steps).
-- Columns with constant defaults: no table rewrite.
-- job_waits holds one edge per (unfinished dependency, dependent), by seq (the primary key),
-- deleted when the dependency completes: a completion reads only its own edges
-- (_release_dependents), never a scan of the dependents.
ALTER TABLE jobs ADD COLUMN deps_left integer NOT NULL DEFAULT 0,
                 ADD COLUMN has_dependents boolean NOT NULL DEFAULT false,
                 ADD COLUMN depends_on bytea,
                 ADD COLUMN workflow_id bytea;

CREATE TABLE job_waits (
    parent_seq  bigint NOT NULL,
    child_seq   bigint NOT NULL,
    PRIMARY KEY (parent_seq, child_seq)
);
CREATE INDEX job_waits_child ON job_waits (child_seq);

CREATE INDEX jobs_deferred ON jobs (queue) WHERE state = 7;

-- The release, in the statement that completes a dependency (any path: a batched ack that
-- commits by itself, one ack in a transaction). Each dependent still DEFERRED loses one
-- unfinished dependency; at the last it becomes READY, or SCHEDULED when its run_at is after
-- the completion. Two dependencies of one job completed at once by two transactions: the
-- second UPDATE waits for the first's row lock and then reads the row it wrote (READ
-- COMMITTED), so the job is released once. The nodes' long polls of the queues made READY
-- are woken by a NOTIFY sent at commit (origin 'deps': every node, this one too, wakes).
CREATE FUNCTION _release_dependents() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    ready text[];
BEGIN
    WITH gone AS (DELETE FROM job_waits WHERE parent_seq = NEW.seq RETURNING child_seq),
    released AS (
        UPDATE jobs j SET deps_left = j.deps_left - 1,
            state = CASE WHEN j.deps_left > 1 THEN 7 WHEN j.run_at > NEW.finished_at THEN 1 ELSE 2 END
        FROM gone WHERE j.seq = gone.child_seq AND j.state = 7
        RETURNING j.queue, j.state)
    SELECT array_agg(DISTINCT queue) INTO ready FROM released WHERE state = 2;
    IF ready IS NOT NULL THEN
        PERFORM pg_notify('sepp_' || current_schema(), jsonb_build_object('o', 'deps', 'q', to_jsonb(ready))::text);
    END IF;
    RETURN NULL;
END;
$$;

CREATE TRIGGER jobs_release AFTER UPDATE OF state ON jobs FOR EACH ROW
    WHEN (NEW.state = 4 AND OLD.state <> 4 AND NEW.has_dependents)
    EXECUTE FUNCTION _release_dependents();
