-- Named queries of the periodic schedules on PostgreSQL ($n parameters). Times
-- bigint µs UTC. Several nodes may run each at the same moment: every write is one
-- statement on the schedule's row (its row lock orders them).

-- name: load_all
SELECT name, definition, source, paused, active_since, last_tick, last_run_at, last_job_id, last_error, updated_at
FROM periodic ORDER BY name;

-- name: load_named
SELECT name, definition, source, paused, active_since, last_tick, last_run_at, last_job_id, last_error, updated_at
FROM periodic WHERE name = ANY($1::text[]) ORDER BY name;

-- name: put
-- $1 name, $2 definition, $3 source, $4 now: created with active_since = now, or the
-- definition and source replaced (the state kept). RETURNING tells which (xmax = 0: inserted).
INSERT INTO periodic (name, definition, source, paused, active_since, updated_at) VALUES ($1, $2, $3, false, $4, $4)
ON CONFLICT (name) DO UPDATE SET definition = excluded.definition, source = excluded.source,
    updated_at = excluded.updated_at
RETURNING (xmax = 0) AS created;

-- name: set_paused
-- $1 name, $2 paused, $3 now: a resume of a paused schedule restarts active_since.
UPDATE periodic SET active_since = CASE WHEN paused AND NOT $2 THEN $3 ELSE active_since END,
    paused = $2, updated_at = $3
WHERE name = $1
RETURNING name, definition, source, paused, active_since, last_tick, last_run_at, last_job_id, last_error, updated_at;

-- name: delete
DELETE FROM periodic WHERE name = $1;

-- name: record_runs
-- Parallel arrays: $1 names, $2 ticks (0: a trigger), $3 job ids, $4 errors, $5 when. The
-- last run is replaced unless a later one is recorded; last_tick only grows.
UPDATE periodic AS p SET last_tick = GREATEST(p.last_tick, r.tick),
    last_job_id = CASE WHEN r.at >= p.last_run_at THEN r.job_id ELSE p.last_job_id END,
    last_error = CASE WHEN r.at >= p.last_run_at THEN r.error ELSE p.last_error END,
    last_run_at = GREATEST(p.last_run_at, r.at)
FROM unnest($1::text[], $2::bigint[], $3::bytea[], $4::text[], $5::bigint[]) AS r(name, tick, job_id, error, at)
WHERE p.name = r.name;
