-- sepp SQLite schema, version 9: the error-text search's index.
-- An error search inside DEAD_LETTERED or CANCELLED walked jobs_finished and read every
-- candidate's row for its history (one table page each: the rows of one state are spread
-- over the table), ~3 µs a candidate, 10,000 of them for a rare error. last_error holds
-- the last attempt's error message of a job in one of those two states, so the walk reads
-- it from jobs_failed alone (a covering index, one statement a round).
--
-- last_error is kept by the triggers below, never written by the store's statements: it is
-- (re)computed whenever a job's state or history changes while the job is (or becomes)
-- DEAD_LETTERED / CANCELLED, so it is the last error of every row jobs_failed holds. A row in
-- another state may keep a stale value; nothing reads it there (the index leaves such rows
-- out). No job is inserted in those states (insert_job: SCHEDULED or READY), so an insert
-- pays nothing: no trigger, no index entry. A history that is not a JSON array (a damaged
-- row) or an attempt without a message gives NULL, as the listing reads it.
ALTER TABLE jobs ADD COLUMN last_error TEXT;

CREATE TRIGGER jobs_last_error AFTER UPDATE OF state, history ON jobs
WHEN NEW.state >= 5
BEGIN
    UPDATE jobs SET last_error = CASE
        WHEN typeof(NEW.history) = 'text' AND json_valid(NEW.history) AND json_type(NEW.history) = 'array'
        THEN json_extract(NEW.history, '$[#-1].error_message') END
    WHERE seq = NEW.seq;
END;

UPDATE jobs SET last_error = CASE
    WHEN typeof(history) = 'text' AND json_valid(history) AND json_type(history) = 'array'
    THEN json_extract(history, '$[#-1].error_message') END
WHERE state >= 5;

CREATE INDEX jobs_failed ON jobs (state, queue, finished_at, seq, last_error) WHERE state >= 5;
