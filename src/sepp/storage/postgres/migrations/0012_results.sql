-- sepp PostgreSQL schema, version 12: a job's result (SQLite's migration 0012). What the
-- handler returned, written by the ack that completes the job in the same statement
-- (ack_many_results, complete_one): its bytes and its encoding label, both NULL for a job
-- without one. Deleted with the row when the completed retention ends (prune). Nullable
-- columns without a default are a catalog change only (no table rewrite; existing rows read
-- NULL), so the migration holds its ACCESS EXCLUSIVE lock on jobs for an instant.
ALTER TABLE jobs ADD COLUMN result bytea, ADD COLUMN result_encoding text;
