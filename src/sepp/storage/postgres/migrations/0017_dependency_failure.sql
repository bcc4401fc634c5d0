-- sepp PostgreSQL schema, version 17: what a failed dependency does (docs/workflows.md "When
-- a dependency fails"; SQLite's migration 0015).
--   on_dep_fail     the job's policy when a dependency is dead-lettered or cancelled:
--                   0 cancel (the default), 1 run, 2 wait;
--   dep_failed_by   of a job CANCELLED because a dependency failed: that dependency's seq
--                   (a redrive of it revives the job); NULL otherwise.
ALTER TABLE jobs ADD COLUMN on_dep_fail smallint NOT NULL DEFAULT 0,
                 ADD COLUMN dep_failed_by bigint;
CREATE INDEX jobs_dep_failed_by ON jobs (dep_failed_by) WHERE dep_failed_by IS NOT NULL;

-- The release counts every completed dependency, whatever state the dependent is in (a
-- dependent CANCELLED because of another dependency keeps its count right for its revival):
-- deps_left is always the number of its job_waits edges. Only a DEFERRED one changes state.
CREATE OR REPLACE FUNCTION _release_dependents() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    ready text[];
BEGIN
    WITH gone AS (DELETE FROM job_waits WHERE parent_seq = NEW.seq RETURNING child_seq),
    released AS (
        UPDATE jobs j SET deps_left = j.deps_left - 1,
            state = CASE WHEN j.state <> 7 THEN j.state WHEN j.deps_left > 1 THEN 7
                         WHEN j.run_at > NEW.finished_at THEN 1 ELSE 2 END
        FROM gone WHERE j.seq = gone.child_seq
        RETURNING j.queue, j.state)
    SELECT array_agg(DISTINCT queue) INTO ready FROM released WHERE state = 2;
    IF ready IS NOT NULL THEN
        PERFORM pg_notify('sepp_' || current_schema(), jsonb_build_object('o', 'deps', 'q', to_jsonb(ready))::text);
    END IF;
    RETURN NULL;
END;
$$;

-- A dependency DEAD_LETTERED or CANCELLED, in the statement that does it (a nack, a lease
-- expiry, an admin cancel): its dependents are handled level by level in this one call —
-- "run" ones lose the edge and are released at their last, "cancel" ones still DEFERRED are
-- CANCELLED naming it (and their own dependents handled next), "wait" ones are left alone.
-- The cancels below fire this trigger again for each cancelled job; those nested calls return
-- at once (pg_trigger_depth), the loop here handling every level, so a long chain costs no
-- stack.
CREATE FUNCTION _fail_dependents() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    failed bigint[] := ARRAY[NEW.seq];
    ready text[];
BEGIN
    IF pg_trigger_depth() > 1 THEN
        RETURN NULL;
    END IF;
    WHILE cardinality(failed) > 0 LOOP
        WITH gone AS (
            DELETE FROM job_waits w USING jobs c
            WHERE w.parent_seq = ANY(failed) AND c.seq = w.child_seq AND c.on_dep_fail = 1
            RETURNING w.child_seq),
        n AS (SELECT child_seq, count(*)::integer AS k FROM gone GROUP BY child_seq),
        released AS (
            UPDATE jobs j SET deps_left = j.deps_left - n.k,
                state = CASE WHEN j.state <> 7 THEN j.state WHEN j.deps_left > n.k THEN 7
                             WHEN j.run_at > NEW.finished_at THEN 1 ELSE 2 END
            FROM n WHERE j.seq = n.child_seq
            RETURNING j.queue, j.state)
        SELECT array_agg(DISTINCT queue) INTO ready FROM released WHERE state = 2;
        IF ready IS NOT NULL THEN
            PERFORM pg_notify('sepp_' || current_schema(), jsonb_build_object('o', 'deps', 'q', to_jsonb(ready))::text);
        END IF;
        WITH cancelled AS (
            UPDATE jobs j SET state = 6, finished_at = NEW.finished_at, purge_at = NEW.purge_at,
                reason = 'DEPENDENCY_FAILED: dependency ' || encode(p.id, 'hex')::uuid::text || ' was '
                         || CASE WHEN p.state = 5 THEN 'dead-lettered' ELSE 'cancelled' END,
                dep_failed_by = p.seq
            FROM job_waits w JOIN jobs p ON p.seq = w.parent_seq
            WHERE w.parent_seq = ANY(failed) AND j.seq = w.child_seq AND j.on_dep_fail = 0 AND j.state = 7
            RETURNING j.seq, j.has_dependents)
        SELECT coalesce(array_agg(seq) FILTER (WHERE has_dependents), '{}') INTO failed FROM cancelled;
    END LOOP;
    RETURN NULL;
END;
$$;

CREATE TRIGGER jobs_dep_failed AFTER UPDATE OF state ON jobs FOR EACH ROW
    WHEN (NEW.state IN (5, 6) AND OLD.state NOT IN (5, 6) AND NEW.has_dependents)
    EXECUTE FUNCTION _fail_dependents();

-- Trigger functions only: no role needs to call them (PostgreSQL grants EXECUTE to PUBLIC by
-- default; the SQL enqueue's app role must reach nothing but its three functions).
REVOKE ALL ON FUNCTION _release_dependents() FROM PUBLIC;
REVOKE ALL ON FUNCTION _fail_dependents() FROM PUBLIC;
