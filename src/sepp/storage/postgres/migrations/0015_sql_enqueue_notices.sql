-- sepp PostgreSQL schema, version 15: the nodes hear of the jobs enqueued through SQL
-- (docs/decisions.md "Jobs enqueued through SQL: the live events and the count"). The NOTIFY said
-- only which queues to wake; it now also carries, for every call that stored jobs, how many
-- each queue got and the blocks of seqs holding them: each node counts them
-- (sepp_jobs_enqueued_sql_total) and a node with WatchJobs watchers reads the jobs of those
-- blocks for their live `enqueued` events. A payload is at most 8,000 bytes (PostgreSQL
-- refuses a longer one, which would abort the caller's transaction): long lists are split
-- over several notifications, each distinct (PostgreSQL folds identical notifications of one
-- transaction into one). The signatures of enqueue and enqueue_batch are unchanged; a node
-- of version 14 reads the "q" and "k" keys as before and ignores the new ones.

-- Notify the nodes' channel (sepp_<schema>, delivered at commit, never on rollback) of one
-- _enqueue call: payloads {"o": "sql", "k": queues were created (the first payload only),
-- "q": [queues with jobs READY now], "c": {queue: jobs stored}, "s": [[first seq, seqs], …]}
-- — `blocks` are the call's blocks of 1,024 seqs (the i-th holds its jobs (i-1)*1024+1 … i*1024),
-- named only when some job was stored (not deduplicated: `keep`). Nothing when there is
-- nothing to say.
CREATE FUNCTION _tell_nodes(ready text[], queues text[], keep boolean[], blocks bigint[], n int, created boolean)
    RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    channel text := 'sepp_' || current_schema();
    budget constant int := 7000;  -- bytes a payload's lists may take (a payload is at most 8,000)
    head text := '{"o":"sql","k":' || created::text;
    q jsonb := '[]';
    c jsonb := '{}';
    s jsonb := '[]';
    size int := 0;
    item int;
    stored bigint := 0;
    i int;
    r record;
BEGIN
    FOR r IN SELECT u.q AS queue, count(*) FILTER (WHERE u.kept) AS kept, bool_or(u.q = ANY (ready)) AS due
             FROM unnest(queues, keep) AS u(q, kept) GROUP BY u.q LOOP
        item := 2 * octet_length(to_jsonb(r.queue)::text) + 24;
        IF size + item > budget THEN
            PERFORM pg_notify(channel, head || ',"q":' || q::text || ',"c":' || c::text || ',"s":[]}');
            head := '{"o":"sql","k":false';
            q := '[]';
            c := '{}';
            size := 0;
        END IF;
        IF r.due THEN
            q := q || to_jsonb(r.queue);
        END IF;
        IF r.kept > 0 THEN
            c := c || jsonb_build_object(r.queue, r.kept);
        END IF;
        size := size + item;
        stored := stored + r.kept;
    END LOOP;
    IF stored > 0 THEN
        FOR i IN 1 .. coalesce(array_length(blocks, 1), 0) LOOP
            IF size + 48 > budget THEN
                PERFORM pg_notify(channel, head || ',"q":' || q::text || ',"c":' || c::text || ',"s":' || s::text
                                  || '}');
                head := '{"o":"sql","k":false';
                q := '[]';
                c := '{}';
                s := '[]';
                size := 0;
            END IF;
            s := s || jsonb_build_array(jsonb_build_array(blocks[i], least(1024, n - (i - 1) * 1024)));
            size := size + 48;
        END LOOP;
    END IF;
    IF q <> '[]' OR c <> '{}' OR s <> '[]' OR head <> '{"o":"sql","k":false' THEN
        PERFORM pg_notify(channel, head || ',"q":' || q::text || ',"c":' || c::text || ',"s":' || s::text || '}');
    END IF;
END;
$$;

CREATE OR REPLACE FUNCTION _enqueue(queues text[], job_types text[], payloads bytea[], encodings text[], customs jsonb[],
                         priorities int[], max_attempts int[], scheduled_ats timestamptz[], idempotency_keys text[],
                         trace_contexts jsonb[], batch boolean)
    RETURNS TABLE (job_id uuid, deduplicated boolean) LANGUAGE plpgsql AS $$
DECLARE
    n int := coalesce(array_length(queues, 1), 0);
    now_us bigint := (extract(epoch FROM clock_timestamp()) * 1000000)::bigint;
    strict_mode boolean;
    lim jsonb;
    defaults_text text;
    defaults jsonb;
    qcache jsonb := '{}';    -- queue → its stored settings, or null when it has none (yet)
    plain jsonb := '{}';     -- queue, job type, encoding → the largest payload passing; -1: refused
    created text[] := '{}';
    queue_count bigint;
    qs jsonb;
    verdict jsonb;
    cap bigint;
    pk text;
    blocks bigint[];
    hi bytea;
    ids bytea[];
    seqs bigint[];
    keys text[];
    untils bigint[];
    ready text[];
    first_of jsonb;
    claimed text[];
    dedup bytea[];
    keep boolean[];
    holder bytea;
    any_custom boolean := false;
    any_key boolean := false;
    k text;
    r record;
BEGIN
    IF n = 0 THEN
        RETURN;
    END IF;
    IF array_length(job_types, 1) IS DISTINCT FROM n
       OR coalesce(array_length(payloads, 1), n) <> n OR coalesce(array_length(encodings, 1), n) <> n
       OR coalesce(array_length(customs, 1), n) <> n OR coalesce(array_length(priorities, 1), n) <> n
       OR coalesce(array_length(max_attempts, 1), n) <> n OR coalesce(array_length(scheduled_ats, 1), n) <> n
       OR coalesce(array_length(idempotency_keys, 1), n) <> n OR coalesce(array_length(trace_contexts, 1), n) <> n THEN
        RAISE EXCEPTION 'sepp.enqueue_batch: every array must have as many elements as queues (%)', n
            USING ERRCODE = 'SE000', DETAIL = '{"code": 0, "reason": "INVALID_ARGUMENT", "field": "jobs"}';
    END IF;
    SELECT a.strict, a.limits, a.queue_defaults INTO strict_mode, lim, defaults_text FROM admission a;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'sepp.enqueue: the admission settings are missing; run sepp migrate' USING ERRCODE = 'SE000';
    END IF;
    defaults := defaults_text::jsonb;
    -- Pass 1, the verdicts: the first rejected job raises (nothing stored).
    FOR r IN SELECT * FROM unnest(queues, job_types, payloads, encodings, customs, priorities, max_attempts,
                                  scheduled_ats, idempotency_keys, trace_contexts)
                           WITH ORDINALITY AS u(uq, ut, up, ue, uc, upr, uma, usa, uk, utc, uo) LOOP
        IF NOT qcache ? coalesce(r.uq, '') THEN
            SELECT q.settings::jsonb INTO qs FROM queues q WHERE q.name = r.uq;
            qcache := qcache || jsonb_build_object(coalesce(r.uq, ''), coalesce(qs, 'null'::jsonb));
        END IF;
        qs := nullif(qcache -> coalesce(r.uq, ''), 'null'::jsonb);
        IF qs IS NULL AND queue_count IS NULL AND NOT strict_mode THEN  -- counted only for a new queue
            SELECT count(*) INTO queue_count FROM queues;
        END IF;
        IF coalesce(r.uc, '{}') = '{}' AND coalesce(r.utc, '{}') = '{}' AND r.upr IS NULL AND r.uma IS NULL
           AND r.usa IS NULL AND coalesce(r.uk, '') = '' THEN
            pk := coalesce(r.uq, '') || chr(31) || coalesce(r.ut, '') || chr(31) || coalesce(r.ue, '');
            IF NOT plain ? pk THEN
                verdict := _check(r.uq, r.ut, 0, coalesce(r.ue, ''), '{}', NULL, NULL, NULL, '', '{}', lim,
                                  coalesce(qs, defaults), qs IS NOT NULL, strict_mode,
                                  CASE WHEN r.uq = ANY (created) THEN 0 ELSE queue_count + cardinality(created) END,
                                  now_us);
                plain := plain || jsonb_build_object(pk, CASE WHEN verdict IS NOT NULL THEN -1 ELSE
                    coalesce((coalesce(qs, defaults) #>> '{limits,max_payload_bytes}')::bigint, 1048576) END);
            END IF;
            cap := (plain ->> pk)::bigint;
            verdict := NULL;
        ELSE
            cap := -1;
        END IF;
        IF cap < 0 OR coalesce(octet_length(r.up), 0) > cap THEN
            verdict := _check(r.uq, r.ut, coalesce(octet_length(r.up), 0), coalesce(r.ue, ''), coalesce(r.uc, '{}'),
                              r.upr, r.uma, r.usa, coalesce(r.uk, ''), coalesce(r.utc, '{}'), lim,
                              coalesce(qs, defaults), qs IS NOT NULL, strict_mode,
                              CASE WHEN r.uq = ANY (created) THEN 0 ELSE queue_count + cardinality(created) END, now_us);
            IF verdict IS NOT NULL THEN
                PERFORM _raise(verdict, CASE WHEN batch THEN r.uo::int - 1 END);
            END IF;
        END IF;
        IF qs IS NULL AND NOT r.uq = ANY (created) THEN
            created := created || r.uq;
        END IF;
        any_custom := any_custom OR coalesce(r.uc, '{}') <> '{}';
        any_key := any_key OR coalesce(r.uk, '') <> '';
    END LOOP;
    -- New queues: created with the defaults, as a node creates a queue on first enqueue.
    IF cardinality(created) > 0 THEN
        INSERT INTO queues (name, settings, paused, declared, created_at, updated_at)
        SELECT c, defaults_text, false, false, now_us, now_us FROM unnest(created) c
        ON CONFLICT (name) DO NOTHING;
        SELECT qcache || jsonb_object_agg(c, defaults) INTO qcache FROM unnest(created) c;
    END IF;
    -- Seqs: one block of the jobs sequence per 1,024 jobs, as a node takes them (ids.BLOCK);
    -- ids: UUIDv7 of this moment carrying the seq (ids.make_id).
    SELECT array_agg(nextval('jobs_seq_seq') ORDER BY g) INTO blocks FROM generate_series(1, (n + 1023) / 1024) g;
    hi := substring(int8send(now_us / 1000) FROM 3 FOR 6)
          || substring(int8send(28672 | ((now_us % 1000) * 1000 * 4096 / 1000000)) FROM 7 FOR 2);
    SELECT array_agg(x.seq ORDER BY x.o), array_agg(hi || int8send(x.seq | (-9223372036854775807 - 1)) ORDER BY x.o),
           array_agg(x.k ORDER BY x.o),
           array_agg(CASE WHEN x.k IS NULL THEN 0 ELSE now_us + trunc(coalesce(
               (qcache -> x.q ->> 'dedup_window')::numeric, 86400) * 1000000)::bigint END ORDER BY x.o),
           coalesce(array_agg(DISTINCT x.q) FILTER (WHERE x.sa IS NULL OR x.sa <= now_us), '{}')
    INTO seqs, ids, keys, untils, ready
    FROM (SELECT u.o::int AS o, blocks[(u.o::int - 1) / 1024 + 1] + (u.o - 1) % 1024 AS seq, u.q, nullif(u.k, '') AS k,
                 floor(extract(epoch FROM u.sa) * 1000000)::bigint AS sa
          FROM unnest(queues, idempotency_keys, scheduled_ats) WITH ORDINALITY AS u(q, k, sa, o)) x;
    -- Idempotency keys: claimed as a node claims them (queries.sql claim_keys, held_keys), in
    -- (queue, key) order; a key held by a live claim deduplicates its job against the holder,
    -- a later job of this call with a key claimed here against the call's first.
    dedup := array_fill(NULL::bytea, ARRAY[n]);
    keep := array_fill(true, ARRAY[n]);
    IF any_key THEN
        SELECT jsonb_object_agg(f.qk, f.o) INTO first_of FROM (
            SELECT DISTINCT ON (u.q || chr(31) || u.k) u.q || chr(31) || u.k AS qk, u.o
            FROM unnest(queues, keys) WITH ORDINALITY AS u(q, k, o) WHERE u.k IS NOT NULL
            ORDER BY u.q || chr(31) || u.k, u.o) f;
    END IF;
    IF first_of IS NOT NULL THEN
        WITH c AS (
            INSERT INTO idempotency AS ik (queue, key, job_id, expires_at)
            SELECT queues[f.value::int], keys[f.value::int], ids[f.value::int], untils[f.value::int]
            FROM jsonb_each_text(first_of) f
            ORDER BY queues[f.value::int] COLLATE "C", keys[f.value::int] COLLATE "C"
            ON CONFLICT (queue, key) DO UPDATE SET job_id = excluded.job_id, expires_at = excluded.expires_at
                WHERE ik.expires_at <= now_us
            RETURNING ik.queue, ik.key)
        SELECT coalesce(array_agg(c.queue || chr(31) || c.key), '{}') INTO claimed FROM c;
        FOR r IN SELECT u.q, u.k, u.o::int AS o FROM unnest(queues, keys) WITH ORDINALITY AS u(q, k, o)
                 WHERE u.k IS NOT NULL LOOP
            k := r.q || chr(31) || r.k;
            IF k = ANY (claimed) THEN
                IF (first_of ->> k)::int <> r.o THEN
                    dedup[r.o] := ids[(first_of ->> k)::int];
                    keep[r.o] := false;
                END IF;
            ELSE
                SELECT h.job_id INTO holder FROM idempotency h WHERE h.queue = r.q AND h.key = r.k;
                IF NOT FOUND THEN
                    RAISE EXCEPTION 'idempotency key % of queue % neither claimed nor held', r.k, r.q
                        USING ERRCODE = 'SE000';
                END IF;
                dedup[r.o] := holder;
                keep[r.o] := false;
            END IF;
        END LOOP;
    END IF;
    INSERT INTO jobs (id, queue, job_type, state, priority, run_at, enqueued_at, max_attempts, payload, encoding,
                      extras, idempotency_key, seq)
    SELECT u.id, u.q, u.t, CASE WHEN u.at > now_us THEN 1 ELSE 2 END, coalesce(u.pr,
               (qcache -> u.q ->> 'default_priority')::int, (defaults ->> 'default_priority')::int, 5),
           greatest(coalesce(u.at, now_us), now_us), now_us, coalesce(u.ma,
               (qcache -> u.q ->> 'default_max_attempts')::int, (defaults ->> 'default_max_attempts')::int, 10),
           coalesce(u.p, '\x'::bytea), coalesce(u.e, ''),
           CASE WHEN coalesce(u.c, '{}') = '{}' AND coalesce(u.tc, '{}') = '{}' THEN NULL ELSE _pb_extras(u.c, u.tc) END,
           u.k, u.seq
    FROM (SELECT v.*, floor(extract(epoch FROM v.sa) * 1000000)::bigint AS at
          FROM unnest(ids, seqs, queues, job_types, payloads, encodings, customs, priorities, max_attempts,
                      scheduled_ats, keys, trace_contexts, keep)
               AS v(id, seq, q, t, p, e, c, pr, ma, sa, k, tc, kept)) u
    WHERE u.kept;
    -- The custom-search index entries of the jobs stored (search.indexable: key and text at
    -- most 256 UTF-8 bytes).
    IF any_custom THEN
        INSERT INTO job_custom (seq, key, value)
        SELECT u.seq, e.key, _custom_text(e.value)
        FROM unnest(seqs, customs, keep) AS u(seq, c, kept), jsonb_each(u.c) e
        WHERE u.kept AND u.c IS NOT NULL AND octet_length(e.key) <= 256 AND octet_length(_custom_text(e.value)) <= 256;
    END IF;
    -- Tell the nodes, at commit: wake their long polls, have them reload the queues when some
    -- were created, and name the blocks of seqs holding the jobs stored (_tell_nodes).
    PERFORM _tell_nodes(ready, queues, keep, blocks, n, cardinality(created) > 0);
    RETURN QUERY SELECT encode(coalesce(u.d, u.i), 'hex')::uuid, u.d IS NOT NULL
                 FROM unnest(ids, dedup) WITH ORDINALITY AS u(i, d, o) ORDER BY u.o;
END;
$$;

REVOKE ALL ON FUNCTION _tell_nodes(text[], text[], boolean[], bigint[], int, boolean) FROM PUBLIC;
