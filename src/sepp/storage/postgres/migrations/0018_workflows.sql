-- sepp PostgreSQL schema, version 18: workflows (docs/workflows.md "Workflows"; SQLite's
-- migration 0016).
--   jobs.workflow_id   (a column since the dependencies' migration) is now filled: the
--                      16-byte id of the workflow (EnqueueWorkflow) the job was stored
--                      with; NULL for a job enqueued alone. Indexed for the workflow's jobs.
-- workflow_keys holds a workflow's idempotency key until dedup_until (µs UTC): a retried
-- EnqueueWorkflow with the key answers workflow_id and job_ids (the nodes' 16-byte ids end
-- to end, in node order) and stores nothing. An expired key is replaced by the next claim
-- (INSERT … ON CONFLICT: exactly one of two concurrent claims, on any node, wins).
CREATE INDEX jobs_workflow ON jobs (workflow_id) WHERE workflow_id IS NOT NULL;

CREATE TABLE workflow_keys (
    idempotency_key text PRIMARY KEY,
    workflow_id     bytea NOT NULL,
    dedup_until     bigint NOT NULL,
    job_ids         bytea NOT NULL
);
