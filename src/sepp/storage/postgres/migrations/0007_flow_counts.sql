-- sepp PostgreSQL schema, version 7: a bound on each limited queue's RESERVED jobs
-- (measured: storage/postgres/flow.py, docs/decisions.md "A bound instead of a
-- count"). Written only by a Reserve of a queue with max_in_flight or a per-key limit,
-- in its transaction, under the queue's flow lock:
--   ck_reserved  the queue's RESERVED jobs counted exactly at ck_at (µs UTC),
--   ck_leased    the value of `leased` at that count,
--   leased       a running total of the jobs such reserves may have leased since
--                (each adds what it asked for, so it over-counts, never under-counts).
-- RESERVED now <= ck_reserved + (leased - ck_leased): only leases make a job RESERVED,
-- and settles, expiries and deletes only take jobs out. While that bound leaves room for
-- a Reserve, the Reserve skips the count (its cost grows with the queue's churn).
CREATE TABLE flow_counts (
    queue        text PRIMARY KEY,
    leased       bigint NOT NULL,
    ck_reserved  bigint NOT NULL,
    ck_leased    bigint NOT NULL,
    ck_at        bigint NOT NULL
);
