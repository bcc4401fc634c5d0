-- sepp PostgreSQL schema, version 9: a worker's clean stop on the Workers page. stopped_at
-- (bigint µs UTC, 0 = none) is when the worker's final StopReserving reached the reporting
-- node after its last Reserve there; the listing shows the worker stopped while the latest
-- stopped_at of its rows is not before its latest last_reserve on any node. Older nodes'
-- reports leave the default (0: never stopped), so they keep working on this schema.
ALTER TABLE workers ADD COLUMN stopped_at bigint NOT NULL DEFAULT 0;
