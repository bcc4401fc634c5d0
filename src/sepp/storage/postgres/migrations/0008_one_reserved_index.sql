-- sepp PostgreSQL schema, version 8: one index over the RESERVED jobs instead of two
-- (docs/decisions.md "One index over the RESERVED jobs"). jobs_leased (lease_expires_at)
-- and jobs_reserved (queue), both WHERE state = 3, held the same rows, so every lease and
-- every settle of a job inserted an entry in each (a state change is never a HOT update:
-- state is in every partial index's predicate). The one that replaces them is ordered by
-- queue first, for what reads one queue's RESERVED jobs (flow control's count and extras,
-- the admin counts, purges and held-back view), and by expiry within a queue, for the
-- reclaim sweep: expired_leases finds the queues that hold RESERVED jobs by a skip scan
-- of this index and probes each one for its oldest expired leases (queries.sql).
-- Built in the migration's transaction (a SHARE lock on jobs: writes wait for one scan of
-- the table; the RESERVED jobs are few). Old nodes keep working on it, their sweep slower.
DROP INDEX jobs_leased;
DROP INDEX jobs_reserved;
CREATE INDEX jobs_leased ON jobs (queue, lease_expires_at) WHERE state = 3;
