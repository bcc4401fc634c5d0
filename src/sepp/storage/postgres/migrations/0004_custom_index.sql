-- sepp PostgreSQL schema, version 4: the custom-map search index, as
-- SQLite's migration 0006: one row per indexed custom entry of a job, the value as text,
-- written by the enqueue in its transaction only for jobs with custom entries.
--   (seq, key)         primary key: a job's entries (deleted with the job) and the probe of
--                      a second search term;
--   (key, value, seq)  the search: the jobs with key = value in enqueue order.
-- A B-tree side table rather than a jsonb column with a GIN index: a GIN bitmap scan must
-- fetch and sort every match before a LIMIT applies (a common value such as
-- tenant=acme matching 300,000 jobs costs seconds), while this index hands the matches
-- over in page order and the page stops at its size (docs/decisions.md "Search").
CREATE TABLE job_custom (
    seq    bigint NOT NULL,
    key    text NOT NULL,
    value  text NOT NULL,
    PRIMARY KEY (seq, key)
);
CREATE INDEX job_custom_match ON job_custom (key, value, seq);

-- A job's entries go with it, however it goes (retention sweep, purge, delete, queue
-- delete). Only jobs with extras can have entries: the WHEN clause skips the others
-- without calling the function.
CREATE FUNCTION job_custom_gone() RETURNS trigger LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
    DELETE FROM job_custom WHERE seq = OLD.seq;
    RETURN NULL;
END;
$$;
CREATE TRIGGER job_custom_gone AFTER DELETE ON jobs FOR EACH ROW WHEN (OLD.extras IS NOT NULL)
EXECUTE FUNCTION job_custom_gone();
