-- sepp SQLite schema, version 12: a job's result (PostgreSQL's migration 0012). What the
-- handler returned, written by the ack that completes the job in the same statement
-- (ack_many_results_head, complete_one): its bytes and its encoding label, both NULL for a
-- job without one. Deleted with the row when the completed retention ends (prune_jobs).
-- Adding nullable columns without a default rewrites nothing: existing rows read NULL.
ALTER TABLE jobs ADD COLUMN result BLOB;
ALTER TABLE jobs ADD COLUMN result_encoding TEXT;
