-- sepp PostgreSQL schema, version 11: the Retries view's index (SQLite's migration 0011).
-- SCHEDULED jobs waiting for a retry (attempt > 0: an attempt failed and was scheduled
-- again) apart from the ones scheduled for their first run. jobs_scheduled (run_at) holds
-- both; walking it for the retries alone would read every first-run job on the way. This
-- partial index holds only the retries, in the order they run: an enqueue never writes it,
-- a retry's nack writes one entry and its promotion to READY removes it. Built in the
-- migration's transaction (a SHARE lock on jobs for one scan; SCHEDULED retries are few).
CREATE INDEX jobs_retrying ON jobs (run_at, seq) WHERE state = 1 AND attempt > 0;
