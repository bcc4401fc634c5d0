-- sepp SQLite schema, version 6: the custom-map search index.
-- One row per indexed custom entry of a job: the value as text (sepp.storage.search
-- CustomEntry: ints in decimal, floats shortest round-trip, bools true/false, strings as
-- they are). Written by the enqueue operation, in the enqueue's transaction, only for jobs
-- that have custom entries (a job without any writes nothing here).
--   (seq, key)         primary key: a job's entries, deleted with the job (trigger below),
--                      and the probe of a second search term;
--   (key, value, seq)  the search: the jobs with key = value in enqueue order.
-- Jobs stored before this version are not in it (their extras are protobuf, which SQL cannot
-- read); every other search (id, key, type, error) finds them.
CREATE TABLE job_custom (
    seq    INTEGER NOT NULL,
    key    TEXT NOT NULL,
    value  TEXT NOT NULL,
    PRIMARY KEY (seq, key)
) WITHOUT ROWID;

CREATE INDEX job_custom_match ON job_custom (key, value, seq);

-- Every way a job goes (retention sweep, purge, delete, queue delete) takes its entries
-- along, in the same transaction. Only jobs with extras (custom map or trace context) can
-- have entries: the others skip the trigger's body.
CREATE TRIGGER job_custom_gone AFTER DELETE ON jobs WHEN old.extras IS NOT NULL
BEGIN
    DELETE FROM job_custom WHERE seq = old.seq;
END;
