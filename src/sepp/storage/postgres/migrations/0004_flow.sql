-- sepp PostgreSQL schema, version 4: flow control (issue 12, docs/flow-control.md).
-- The RESERVED jobs of one queue, counted by a Reserve of a queue with max_in_flight (or
-- max_in_flight_per_key) inside its transaction, under the queue's advisory lock:
-- O(that queue's RESERVED jobs), not all of them.
CREATE INDEX jobs_reserved ON jobs (queue) WHERE state = 3;
