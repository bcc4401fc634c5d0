-- sepp PostgreSQL schema, version 13: a job's progress (SQLite's migration 0013).
-- The latest value a running handler reported (Job.set_progress): JSON text of at most
-- 4,096 bytes, written with a lease extension (ExtendLease.progress), NULL when none. Kept
-- across attempts (the next attempt's first report replaces it) and deleted with the job.
-- A nullable column without a default: no table rewrite.
ALTER TABLE jobs ADD COLUMN progress text;
