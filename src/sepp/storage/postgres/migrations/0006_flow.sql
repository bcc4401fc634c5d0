-- sepp PostgreSQL schema, version 4: flow control (docs/flow-control.md).
-- The RESERVED jobs of one queue, counted by a Reserve of a queue with max_in_flight (or
-- max_in_flight_per_key) inside its transaction, under the queue's advisory lock:
-- O(that queue's RESERVED jobs), not all of them.
CREATE INDEX jobs_reserved ON jobs (queue) WHERE state = 3;
-- The token bucket of each queue with a rate_limit, shared by every node: tokens left
-- (fractional) at updated_at (µs UTC). Read and written by the reserve that draws from it,
-- in its transaction, under the queue's flow lock.
CREATE TABLE flow_buckets (
    queue       text PRIMARY KEY,
    tokens      double precision NOT NULL,
    updated_at  bigint NOT NULL
);
