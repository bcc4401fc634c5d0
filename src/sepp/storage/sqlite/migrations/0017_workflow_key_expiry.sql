-- sepp SQLite schema: workflow keys expire (docs/workflows.md "The workflow's idempotency
-- key"; PostgreSQL's migration of the same name). The retention sweep deletes the
-- workflow_keys rows whose dedup_until (µs UTC) has passed, oldest first, through this index,
-- as it does the jobs' idempotency keys; a claim of an expired key still replaces it.
CREATE INDEX workflow_keys_expiry ON workflow_keys (dedup_until);
