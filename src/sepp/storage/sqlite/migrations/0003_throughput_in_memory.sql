-- sepp SQLite schema, version 3: completed / dead-lettered throughput is counted in memory
-- by the server (like enqueues) and folded into queue_throughput every few seconds, so
-- a settle no longer writes a statistics row per job.
DROP TRIGGER IF EXISTS jobs_throughput_finished;
