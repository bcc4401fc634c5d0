-- sepp SQLite schema, version 10: one index over the RESERVED jobs instead of two
-- (docs/decisions.md "One index over the RESERVED jobs"; PostgreSQL's migration 0008).
-- jobs_leased (lease_expires_at) and jobs_reserved (queue), both WHERE state = 3, held the
-- same rows, so every lease and every settle wrote an entry in each. The one that replaces
-- them is ordered by queue, then expiry (then seq, the rowid every SQLite index ends with):
-- one queue's RESERVED jobs (flow control, admin counts and purges) are one range of it,
-- and the reclaim sweep (expired_leases) walks it queue by queue.
DROP INDEX jobs_leased;
DROP INDEX jobs_reserved;
CREATE INDEX jobs_leased ON jobs (queue, lease_expires_at) WHERE state = 3;
