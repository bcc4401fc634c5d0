-- sepp SQLite schema, version 2: what the admin API, CLI and UI read.
-- Times are integer microseconds since the Unix epoch (UTC); minutes are µs / 60,000,000.

-- Finished jobs (4 COMPLETED, 5 DEAD_LETTERED, 6 CANCELLED) by state, queue and finish time.
-- Serves the finished-state listings (dead-letter page: newest first, keyset on
-- (finished_at, seq)), the counts per finished state (index-only) and the bulk redrive
-- filter on dead-letter time. Partial: an INSERT is always SCHEDULED or READY, so the
-- enqueue path never maintains it; a settle adds one entry, a prune removes one.
CREATE INDEX jobs_finished ON jobs (state, queue, finished_at, seq) WHERE state >= 4;

-- Per-queue, per-minute throughput for the dashboards (last hour shown, 24 h kept).
-- completed / dead_lettered are counted by the trigger below, in the same transaction
-- as the settle (exact, durable). enqueued is counted in memory by the server and
-- added here every few seconds (an INSERT trigger would cost the enqueue path ~30%).
CREATE TABLE queue_throughput (
    queue          TEXT NOT NULL,
    minute         INTEGER NOT NULL,          -- µs / 60,000,000
    enqueued       INTEGER NOT NULL DEFAULT 0,
    completed      INTEGER NOT NULL DEFAULT 0,
    dead_lettered  INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (queue, minute)
) WITHOUT ROWID;

CREATE TRIGGER jobs_throughput_finished AFTER UPDATE OF state ON jobs
WHEN new.state IN (4, 5) AND old.state <> new.state AND new.finished_at IS NOT NULL
BEGIN
    INSERT INTO queue_throughput (queue, minute, completed, dead_lettered)
    VALUES (new.queue, new.finished_at / 60000000, new.state = 4, new.state = 5)
    ON CONFLICT (queue, minute) DO UPDATE
        SET completed = completed + excluded.completed, dead_lettered = dead_lettered + excluded.dead_lettered;
END;

-- Backfill the last day from the jobs already stored.
INSERT INTO queue_throughput (queue, minute, enqueued)
SELECT queue, enqueued_at / 60000000, count(*) FROM jobs
WHERE enqueued_at >= (unixepoch() - 86400) * 1000000
GROUP BY 1, 2;

INSERT INTO queue_throughput (queue, minute, completed, dead_lettered)
SELECT queue, finished_at / 60000000, sum(state = 4), sum(state = 5) FROM jobs
WHERE state >= 4 AND state IN (4, 5) AND finished_at >= (unixepoch() - 86400) * 1000000
GROUP BY 1, 2
ON CONFLICT (queue, minute) DO UPDATE
    SET completed = completed + excluded.completed, dead_lettered = dead_lettered + excluded.dead_lettered;
