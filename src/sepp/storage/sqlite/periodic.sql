-- Named queries of the periodic schedules on SQLite; run on the writer
-- (sepp.storage.sqlite.periodic). Times integer µs UTC.

-- name: load_all
SELECT name, definition, source, paused, active_since, last_tick, last_run_at, last_job_id, last_error, updated_at
FROM periodic ORDER BY name;

-- name: load_named
-- ?1: a JSON array of names.
SELECT name, definition, source, paused, active_since, last_tick, last_run_at, last_job_id, last_error, updated_at
FROM periodic WHERE name IN (SELECT value FROM json_each(?1)) ORDER BY name;

-- name: exists
SELECT 1 FROM periodic WHERE name = ?1;

-- name: put
-- ?1 name, ?2 definition, ?3 source, ?4 now: created with active_since = now, or the
-- definition and source replaced (the state kept).
INSERT INTO periodic (name, definition, source, paused, active_since, updated_at) VALUES (?1, ?2, ?3, 0, ?4, ?4)
ON CONFLICT (name) DO UPDATE SET definition = excluded.definition, source = excluded.source,
    updated_at = excluded.updated_at;

-- name: set_paused
-- ?1 name, ?2 paused (0/1), ?3 now: a resume of a paused schedule restarts active_since.
UPDATE periodic SET active_since = CASE WHEN paused = 1 AND ?2 = 0 THEN ?3 ELSE active_since END,
    paused = ?2, updated_at = ?3
WHERE name = ?1;

-- name: delete
DELETE FROM periodic WHERE name = ?1;

-- name: record_run
-- ?1 name, ?2 tick (0: a trigger), ?3 job id, ?4 error, ?5 when: the last run is replaced
-- unless a later one is recorded; last_tick only grows.
UPDATE periodic SET last_tick = max(last_tick, ?2),
    last_job_id = CASE WHEN ?5 >= last_run_at THEN ?3 ELSE last_job_id END,
    last_error = CASE WHEN ?5 >= last_run_at THEN ?4 ELSE last_error END,
    last_run_at = max(last_run_at, ?5)
WHERE name = ?1;
