-- sepp PostgreSQL schema, version 14: enqueue inside the application's own transaction
-- (docs/enqueue-in-transaction.md). enqueue(...) and enqueue_batch(...) insert jobs in the
-- caller's transaction, applying the server's admission rules (sepp.validation, the same
-- checks in the same order with the same codes), queue auto-creation or strict mode, the
-- queue's defaults, idempotency keys (claimed exactly as a node claims them), ids that carry
-- their seq like a node's, the custom-search index entries, and a NOTIFY on the channel the
-- nodes LISTEN on (delivered at commit: rollback, nothing). A refused job raises SQLSTATE
-- SE0NN (NN = the proto RejectionCode number) with the rejection as JSON in the DETAIL.
--
-- The server-wide settings these rules need (strict mode, [limits], queue_defaults) live in
-- the admission row, written by `sepp migrate` (the defaults, when absent) and by every
-- node at start (its own configuration). Every function here is SECURITY DEFINER with the
-- search_path fixed to this schema then pg_temp (set below, by name), and EXECUTE is
-- revoked from PUBLIC: `sepp migrate --app-role NAME` grants what an application needs.
-- Times bigint µs UTC, as everywhere in this schema.

CREATE TABLE admission (
    one             boolean PRIMARY KEY DEFAULT true CHECK (one),
    strict          boolean NOT NULL,
    limits          jsonb NOT NULL,          -- ServerLimits as JSON (sizes bytes, durations seconds)
    queue_defaults  text NOT NULL,           -- QueueSettings JSON, as a node stores a new queue's row
    updated_at      bigint NOT NULL
);

-- Python's repr() of a string, as sepp.quoting.quote shows a value in a message: single
-- quotes unless the text holds ' and no ", backslash escapes for the quote, \\, \t \n \r,
-- \xNN for C0/C1 controls, DEL, NBSP and the soft hyphen, \uNNNN for the other spaces
-- but U+0020, the line and paragraph separators, the zero-width, joiner and direction
-- marks and the BOM. (No Unicode database here: an unassigned or private-use code point is
-- shown as itself where Python escapes it.)
CREATE FUNCTION _py_repr(t text) RETURNS text LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE STRICT AS $$
DECLARE
    q text := CASE WHEN strpos(t, '''') > 0 AND strpos(t, '"') = 0 THEN '"' ELSE '''' END;
    out text := '';
    c text;
    n int;
BEGIN
    IF t = '' THEN
        RETURN '''''';
    END IF;
    FOREACH c IN ARRAY regexp_split_to_array(t, '') LOOP
        n := ascii(c);
        IF c = '\' THEN out := out || '\\';
        ELSIF c = q THEN out := out || '\' || q;
        ELSIF n = 9 THEN out := out || '\t';
        ELSIF n = 10 THEN out := out || '\n';
        ELSIF n = 13 THEN out := out || '\r';
        ELSIF n < 32 OR n BETWEEN 127 AND 160 OR n = 173 THEN out := out || '\x' || lpad(to_hex(n), 2, '0');
        ELSIF n IN (1564, 5760, 6158, 8232, 8233, 8239, 8287, 12288, 65279) OR n BETWEEN 8192 AND 8207
              OR n BETWEEN 8288 AND 8292 OR n BETWEEN 8294 AND 8303 THEN
            out := out || '\u' || lpad(to_hex(n), 4, '0');
        ELSE out := out || c;
        END IF;
    END LOOP;
    RETURN q || out || q;
END;
$$;

-- The first `lim` UTF-8 bytes of t, never cut inside a character.
CREATE FUNCTION _utf8_head(t text, lim int) RETURNS text LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE STRICT AS $$
DECLARE
    n int := least(length(t), lim);
BEGIN
    WHILE octet_length(left(t, n)) > lim LOOP
        n := n - 1;
    END LOOP;
    RETURN left(t, n);
END;
$$;

-- sepp.quoting.clip: t cut to 200 UTF-8 bytes plus an ellipsis when longer.
CREATE FUNCTION _clip(t text) RETURNS text LANGUAGE sql IMMUTABLE PARALLEL SAFE STRICT
    RETURN CASE WHEN octet_length(t) <= 200 THEN t ELSE _utf8_head(t, 200) || '…' END;

-- sepp.quoting.quote: repr of t, or of its first 200 bytes with an ellipsis and the length.
CREATE FUNCTION _quote(t text) RETURNS text LANGUAGE sql IMMUTABLE PARALLEL SAFE STRICT
    RETURN CASE WHEN octet_length(t) <= 200 THEN _py_repr(t)
                ELSE left(_py_repr(_utf8_head(t, 200)), -1) || '…' || right(_py_repr(_utf8_head(t, 200)), 1)
                     || ' (' || octet_length(t) || ' bytes)' END;

-- The kind of a custom value as the SQL functions take it (jsonb): a string, true/false, a
-- number (an integer literal within int64 is an int, any other number a float), or an
-- object naming the kind — {"string": "…"}, {"int": 42}, {"float": 1.5 | "-0.0" | "NaN" |
-- "Infinity" | "-Infinity"} (a float as text keeps what a JSON number cannot: -0.0, NaN,
-- ±inf), {"bool": true} — as the Python helpers send it. null, {} or anything else
-- is a value with no type (InvalidArgument, as a CustomValue with no kind).
CREATE FUNCTION _custom_kind(v jsonb) RETURNS text LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$
DECLARE
    t text;
BEGIN
    CASE jsonb_typeof(v)
        WHEN 'string' THEN RETURN 'string';
        WHEN 'boolean' THEN RETURN 'bool';
        WHEN 'number' THEN
            t := v #>> '{}';
            IF t ~ '^-?[0-9]+$' AND t::numeric BETWEEN -9223372036854775808 AND 9223372036854775807 THEN
                RETURN 'int';
            END IF;
            RETURN 'float';
        WHEN 'object' THEN
            IF (SELECT count(*) FROM jsonb_object_keys(v)) <> 1 THEN RETURN NULL; END IF;
            IF jsonb_typeof(v -> 'string') = 'string' THEN RETURN 'string'; END IF;
            IF jsonb_typeof(v -> 'bool') = 'boolean' THEN RETURN 'bool'; END IF;
            IF jsonb_typeof(v -> 'int') = 'number' AND (v ->> 'int') ~ '^-?[0-9]+$'
               AND (v ->> 'int')::numeric BETWEEN -9223372036854775808 AND 9223372036854775807 THEN
                RETURN 'int';
            END IF;
            IF jsonb_typeof(v -> 'float') = 'number' OR (jsonb_typeof(v -> 'float') = 'string' AND (v ->> 'float')
                   ~* '^[-+]?(nan|inf|infinity|([0-9]+[.]?[0-9]*|[.][0-9]+)(e[-+]?[0-9]+)?)$') THEN
                RETURN 'float';
            END IF;
            RETURN NULL;
        ELSE RETURN NULL;
    END CASE;
END;
$$;

-- The scalar of a custom value (its kind known): the bare value or the one in its object.
CREATE FUNCTION _custom_scalar(v jsonb) RETURNS jsonb LANGUAGE sql IMMUTABLE PARALLEL SAFE STRICT
    RETURN CASE WHEN jsonb_typeof(v) = 'object' THEN (SELECT e.value FROM jsonb_each(v) e LIMIT 1) ELSE v END;

CREATE FUNCTION _custom_float(v jsonb) RETURNS float8 LANGUAGE sql IMMUTABLE PARALLEL SAFE STRICT
    RETURN (_custom_scalar(v) #>> '{}')::float8;

-- Python's repr() of a finite float: the shortest decimal that reads back as f (PostgreSQL's
-- own text may carry one digit more), fixed notation for exponents -4 to 15 ("42.0",
-- "0.0001"), else scientific with a two-digit exponent ("1e+16", "1.5e-05").
CREATE FUNCTION _py_float(f float8) RETURNS text LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE STRICT AS $$
DECLARE
    x numeric;
    y numeric;
    e int;
    digits text;
BEGIN
    IF f = 0 THEN
        RETURN CASE WHEN f::text LIKE '-%' THEN '-0.0' ELSE '0.0' END;
    END IF;
    x := f::text::numeric;
    e := floor(log(10, abs(x)))::int;
    FOR p IN 1..17 LOOP
        y := round(x, p - 1 - e);
        EXIT WHEN abs(y) <= 1.7976931348623157e308 AND y::float8 = f;  -- (rounding up may overflow)
    END LOOP;
    y := trim_scale(y);
    e := floor(log(10, abs(y)))::int;
    IF e >= -4 AND e < 16 THEN
        RETURN CASE WHEN strpos(y::text, '.') = 0 THEN y::text || '.0' ELSE y::text END;
    END IF;
    digits := rtrim(ltrim(replace(replace(abs(y)::text, '.', ''), '-', ''), '0'), '0');
    RETURN CASE WHEN y < 0 THEN '-' ELSE '' END || left(digits, 1)
           || CASE WHEN length(digits) > 1 THEN '.' || substring(digits FROM 2) ELSE '' END
           || 'e' || CASE WHEN e < 0 THEN '-' ELSE '+' END || CASE WHEN abs(e) < 10 THEN '0' ELSE '' END || abs(e);
END;
$$;

-- sepp.storage.search.value_text: the value as the custom index stores it (a float as
-- Python's repr, _py_float).
CREATE FUNCTION _custom_text(v jsonb) RETURNS text LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE STRICT AS $$
DECLARE
    kind text := _custom_kind(v);
    s jsonb := _custom_scalar(v);
    f float8;
BEGIN
    IF kind = 'string' THEN RETURN s #>> '{}'; END IF;
    IF kind = 'bool' THEN RETURN CASE WHEN s::boolean THEN 'true' ELSE 'false' END; END IF;
    IF kind = 'int' THEN RETURN (s #>> '{}')::numeric::text; END IF;
    f := _custom_float(v);
    IF f = 'NaN'::float8 THEN RETURN 'nan'; END IF;
    IF f = 'Infinity'::float8 THEN RETURN 'inf'; END IF;
    IF f = '-Infinity'::float8 THEN RETURN '-inf'; END IF;
    RETURN _py_float(f);
END;
$$;

-- Protocol-buffer encoding, for the extras blob (the wire EnqueueRequest's custom and
-- trace_context maps, as a node stores them): a varint, a length-delimited field.
CREATE FUNCTION _pb_varint(v numeric) RETURNS bytea LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE STRICT AS $$
DECLARE
    u numeric := CASE WHEN v < 0 THEN v + 18446744073709551616 ELSE v END;
    out bytea := '\x';
    b int;
BEGIN
    LOOP
        b := (u % 128)::int;
        u := div(u, 128);
        IF u = 0 THEN
            RETURN out || set_byte('\x00'::bytea, 0, b);
        END IF;
        out := out || set_byte('\x00'::bytea, 0, b | 128);
    END LOOP;
END;
$$;

CREATE FUNCTION _pb_bytes(tag int, data bytea) RETURNS bytea LANGUAGE sql IMMUTABLE PARALLEL SAFE STRICT
    RETURN _pb_varint(tag) || _pb_varint(length(data)) || data;

-- One CustomValue message (its kind known).
CREATE FUNCTION _pb_custom_value(v jsonb) RETURNS bytea LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE STRICT AS $$
DECLARE
    kind text := _custom_kind(v);
    s jsonb := _custom_scalar(v);
    be bytea;
    le bytea := '\x';
BEGIN
    IF kind = 'string' THEN RETURN _pb_bytes(10, convert_to(s #>> '{}', 'UTF8')); END IF;
    IF kind = 'int' THEN RETURN '\x10'::bytea || _pb_varint((s #>> '{}')::numeric); END IF;
    IF kind = 'bool' THEN RETURN CASE WHEN s::boolean THEN '\x2001'::bytea ELSE '\x2000'::bytea END; END IF;
    be := float8send(_custom_float(v));
    FOR i IN REVERSE 7..0 LOOP
        le := le || substring(be FROM i + 1 FOR 1);
    END LOOP;
    RETURN '\x19'::bytea || le;
END;
$$;

-- The extras blob: EnqueueRequest{custom (field 4), trace_context (field 9)}, NULL when both
-- are empty.
CREATE FUNCTION _pb_extras(custom jsonb, trace jsonb) RETURNS bytea LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$
DECLARE
    out bytea := '\x';
    k text;
    v jsonb;
BEGIN
    FOR k, v IN SELECT e.key, e.value FROM jsonb_each(coalesce(custom, '{}')) e ORDER BY e.key COLLATE "C" LOOP
        out := out || _pb_bytes(34, _pb_bytes(10, convert_to(k, 'UTF8')) || _pb_bytes(18, _pb_custom_value(v)));
    END LOOP;
    FOR k, v IN SELECT e.key, e.value FROM jsonb_each(coalesce(trace, '{}')) e ORDER BY e.key COLLATE "C" LOOP
        out := out || _pb_bytes(74, _pb_bytes(10, convert_to(k, 'UTF8')) || _pb_bytes(18, convert_to(v #>> '{}', 'UTF8')));
    END LOOP;
    RETURN CASE WHEN length(out) = 0 THEN NULL ELSE out END;
END;
$$;

-- A rejection as JSON (sepp.validation's Rejection: code number, catalogue name, wire reason,
-- message, field, limit and actual when set).
CREATE FUNCTION _rejection(code int, message text, field text, lim numeric DEFAULT NULL, actual numeric DEFAULT NULL)
    RETURNS jsonb LANGUAGE sql IMMUTABLE PARALLEL SAFE
    RETURN jsonb_strip_nulls(jsonb_build_object(
        'code', code,
        'name', (ARRAY['InvalidArgument', 'QueueNameInvalid', 'JobTypeInvalid', 'UnknownQueue', 'PayloadTooLarge',
                       'EncodingNotAllowed', 'CustomEntriesTooMany', 'CustomKeyTooLong', 'CustomMapTooLarge',
                       'ScheduledTooFar', 'IdempotencyKeyTooLong', 'TraceContextInvalid'])[code],
        'reason', (ARRAY['INVALID_ARGUMENT', 'QUEUE_NAME_INVALID', 'JOB_TYPE_INVALID', 'UNKNOWN_QUEUE',
                         'PAYLOAD_TOO_LARGE', 'ENCODING_NOT_ALLOWED', 'CUSTOM_ENTRIES_TOO_MANY',
                         'CUSTOM_KEY_TOO_LONG', 'CUSTOM_MAP_TOO_LARGE', 'SCHEDULED_TOO_FAR',
                         'IDEMPOTENCY_KEY_TOO_LONG', 'TRACE_CONTEXT_INVALID'])[code],
        'message', message, 'field', field, 'limit', lim, 'actual', actual));

CREATE FUNCTION _server_fix(k text) RETURNS text LANGUAGE sql IMMUTABLE PARALLEL SAFE STRICT
    RETURN '; to raise it: set [limits] ' || k || ' in the server''s config (SEPP_LIMITS__' || upper(k) || ')';

CREATE FUNCTION _queue_fix(queue text, flag text) RETURNS text LANGUAGE sql IMMUTABLE PARALLEL SAFE STRICT
    RETURN '; to raise it: sepp queues declare ' || _clip(queue) || ' --' || flag || ' N';

-- W3C traceparent (sepp.validation.traceparent_valid).
CREATE FUNCTION _traceparent_valid(v text) RETURNS boolean LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE STRICT AS $$
DECLARE
    m text[] := regexp_match(v, '^([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(-[^\n]*)?$');
BEGIN
    IF m IS NULL OR m[1] = 'ff' OR m[2] = repeat('0', 32) OR m[3] = repeat('0', 16) THEN
        RETURN false;
    END IF;
    RETURN NOT (m[1] = '00' AND m[5] IS NOT NULL);
END;
$$;

-- The verdict on one job (sepp.validation.Validator.check, the same checks in the same
-- order): NULL when it passes, else the rejection (_rejection). lim: the admission row's
-- limits; qsettings: the queue's stored settings, or the queue defaults when it has none
-- (known false: created on this enqueue, if strict mode and max_queues allow); strict, queue_count:
-- strict mode and the queues stored or admitted earlier in the call (for max_queues, as a
-- node counts them); now_us: the time of the call.
CREATE FUNCTION _check(queue text, job_type text, payload_len bigint, encoding text, custom jsonb, priority int,
                       max_attempts int, scheduled_at timestamptz, idempotency_key text, trace jsonb, lim jsonb,
                       qsettings jsonb, known boolean, strict boolean, queue_count bigint, now_us bigint)
    RETURNS jsonb LANGUAGE plpgsql STABLE AS $$
DECLARE
    ceiling int := (lim ->> 'max_attempts_ceiling')::int;
    bad_key text;
    bad_msg text;
    at_us numeric;
    horizon_ns numeric;
    qlim jsonb;
    allowed jsonb;
    total bigint := 0;
    n bigint;
    k text;
    v jsonb;
BEGIN
    -- 1. InvalidArgument: malformed fields.
    IF priority IS NOT NULL AND NOT priority BETWEEN 0 AND 9 THEN
        RETURN _rejection(1, 'priority must be between 0 and 9', 'priority',
                          CASE WHEN priority < 0 THEN 0 ELSE 9 END, priority);
    END IF;
    IF max_attempts IS NOT NULL AND NOT max_attempts BETWEEN 1 AND ceiling THEN
        RETURN _rejection(1, 'max_attempts must be between 1 and ' || ceiling
                             || CASE WHEN max_attempts < 1 THEN '' ELSE _server_fix('max_attempts_ceiling') END,
                          'max_attempts', CASE WHEN max_attempts < 1 THEN 1 ELSE ceiling END, max_attempts);
    END IF;
    IF octet_length(encoding) > (lim ->> 'max_encoding_bytes')::int THEN
        RETURN _rejection(1, 'payload encoding label is too long' || _server_fix('max_encoding_bytes'),
                          'payload.encoding', (lim ->> 'max_encoding_bytes')::int, octet_length(encoding));
    END IF;
    IF jsonb_typeof(custom) <> 'object' THEN
        RETURN _rejection(1, 'custom must be a JSON object (key → value)', 'custom');
    END IF;
    SELECT b.k, b.msg INTO bad_key, bad_msg FROM (
        SELECT e.key AS k, CASE
            WHEN e.key = '' THEN 'custom key is empty'
            WHEN _custom_kind(e.value) IS NULL THEN 'custom value ' || _quote(e.key) || ' has no type'
            WHEN _custom_kind(e.value) = 'float' AND _custom_float(e.value) IN ('NaN', 'Infinity', '-Infinity')
                THEN 'custom value ' || _quote(e.key) || ' is not a finite float'
            END AS msg
        FROM jsonb_each(custom) e) b
    WHERE b.msg IS NOT NULL ORDER BY b.k COLLATE "C", b.msg COLLATE "C" LIMIT 1;
    IF bad_msg IS NOT NULL THEN
        RETURN _rejection(1, bad_msg, 'custom[' || _clip(bad_key) || ']');
    END IF;
    IF scheduled_at IS NOT NULL THEN
        IF NOT isfinite(scheduled_at) THEN
            RETURN _rejection(1, 'scheduled_at is not a valid timestamp', 'scheduled_at');
        END IF;
        at_us := extract(epoch FROM scheduled_at) * 1000000;
        IF at_us < -62135596800000000 OR at_us >= 253402300800000000 THEN
            RETURN _rejection(1, 'scheduled_at is not a valid timestamp', 'scheduled_at');
        END IF;
    END IF;
    -- SQL only: the trace context's values are text (a map<string, string> on the wire).
    IF jsonb_typeof(trace) <> 'object' THEN
        RETURN _rejection(1, 'trace_context must be a JSON object of strings', 'trace_context');
    END IF;
    SELECT min(e.key COLLATE "C") INTO bad_key FROM jsonb_each(trace) e WHERE jsonb_typeof(e.value) <> 'string';
    IF bad_key IS NOT NULL THEN
        RETURN _rejection(1, 'trace context value ' || _quote(bad_key) || ' is not a string',
                          'trace_context[' || _clip(bad_key) || ']');
    END IF;
    -- 2. QueueNameInvalid.
    IF queue IS NULL OR queue = '' THEN
        RETURN _rejection(2, 'queue name is empty', 'queue');
    END IF;
    IF octet_length(queue) > (lim ->> 'max_queue_name_bytes')::int THEN
        RETURN _rejection(2, 'queue name is too long' || _server_fix('max_queue_name_bytes'), 'queue',
                          (lim ->> 'max_queue_name_bytes')::int, octet_length(queue));
    END IF;
    IF queue !~ '^[A-Za-z0-9][A-Za-z0-9._:-]*$' THEN
        RETURN _rejection(2, 'queue name must match [A-Za-z0-9][A-Za-z0-9._:-]*', 'queue');
    END IF;
    -- 3. JobTypeInvalid.
    IF job_type IS NULL OR job_type = '' THEN
        RETURN _rejection(3, 'job type is empty', 'job_type');
    END IF;
    IF octet_length(job_type) > (lim ->> 'max_job_type_bytes')::int THEN
        RETURN _rejection(3, 'job type is too long' || _server_fix('max_job_type_bytes'), 'job_type',
                          (lim ->> 'max_job_type_bytes')::int, octet_length(job_type));
    END IF;
    IF job_type ~ E'[\\x01-\\x1f\\x7f-\\x9f]' THEN
        RETURN _rejection(3, 'job type contains control characters', 'job_type');
    END IF;
    -- 4. UnknownQueue.
    IF NOT known THEN
        IF strict THEN
            RETURN _rejection(4, 'queue ' || _quote(queue) || ' is not declared (strict mode)', 'queue');
        END IF;
        IF queue_count >= (lim ->> 'max_queues')::bigint THEN
            RETURN _rejection(4, 'queue ' || _quote(queue) || ' does not exist and the server''s queue limit is '
                                 || 'reached (limits.max_queues = ' || (lim ->> 'max_queues') || '): delete unused '
                                 || 'queues (sepp queues delete NAME) or declare this one after raising [limits] '
                                 || 'max_queues in the server''s config (SEPP_LIMITS__MAX_QUEUES)', 'queue',
                              (lim ->> 'max_queues')::bigint, queue_count);
        END IF;
    END IF;
    qlim := coalesce(qsettings -> 'limits', '{}');
    -- 5. PayloadTooLarge.
    n := coalesce((qlim ->> 'max_payload_bytes')::bigint, 1048576);
    IF payload_len > n THEN
        RETURN _rejection(5, 'payload is larger than the queue''s max_payload_bytes'
                             || _queue_fix(queue, 'max-payload-bytes'), 'payload.data', n, payload_len);
    END IF;
    -- 6. EncodingNotAllowed.
    allowed := coalesce(qlim -> 'allowed_encodings', '[]');
    IF jsonb_array_length(allowed) > 0 AND NOT allowed ? encoding THEN
        RETURN _rejection(6, 'encoding ' || _quote(encoding) || ' is not allowed on this queue; to allow it: '
                             || 'sepp queues declare ' || _clip(queue) || ' --allowed-encoding LABEL (once per '
                             || 'label it takes, ''*'' for any)', 'payload.encoding');
    END IF;
    -- 7–9. Custom map bounds.
    IF custom <> '{}' THEN
        n := (SELECT count(*) FROM jsonb_object_keys(custom));
        IF n > coalesce((qlim ->> 'max_custom_entries')::bigint, 32) THEN
            RETURN _rejection(7, 'custom map has too many entries' || _queue_fix(queue, 'max-custom-entries'),
                              'custom', coalesce((qlim ->> 'max_custom_entries')::bigint, 32), n);
        END IF;
        n := coalesce((qlim ->> 'max_custom_key_bytes')::bigint, 64);
        SELECT min(e.key COLLATE "C") INTO bad_key FROM jsonb_object_keys(custom) e(key) WHERE octet_length(e.key) > n;
        IF bad_key IS NOT NULL THEN
            RETURN _rejection(8, 'custom key is too long' || _queue_fix(queue, 'max-custom-key-bytes'),
                              'custom[' || _clip(bad_key) || ']', n, octet_length(bad_key));
        END IF;
        FOR k, v IN SELECT e.key, e.value FROM jsonb_each(custom) e LOOP
            total := total + octet_length(k) + CASE _custom_kind(v)
                WHEN 'string' THEN octet_length(_custom_scalar(v) #>> '{}') WHEN 'bool' THEN 1 ELSE 8 END;
        END LOOP;
        n := coalesce((qlim ->> 'max_custom_bytes')::bigint, 8192);
        IF total > n THEN
            RETURN _rejection(9, 'custom map is larger than max_custom_bytes' || _queue_fix(queue, 'max-custom-bytes'),
                              'custom', n, total);
        END IF;
    END IF;
    -- 10. ScheduledTooFar.
    IF scheduled_at IS NOT NULL THEN
        horizon_ns := trunc((lim ->> 'max_schedule_horizon')::numeric * 1000000000);
        IF at_us * 1000 > now_us * 1000::numeric + horizon_ns THEN
            RETURN _rejection(10, 'scheduled_at is further ahead than max_schedule_horizon'
                                  || _server_fix('max_schedule_horizon'), 'scheduled_at',
                              trunc((lim ->> 'max_schedule_horizon')::numeric), ceil((at_us - now_us) / 1000000));
        END IF;
    END IF;
    -- 11. IdempotencyKeyTooLong.
    IF idempotency_key <> '' AND octet_length(idempotency_key) > (lim ->> 'max_idempotency_key_bytes')::int THEN
        RETURN _rejection(11, 'idempotency key is too long' || _server_fix('max_idempotency_key_bytes'),
                          'idempotency_key', (lim ->> 'max_idempotency_key_bytes')::int, octet_length(idempotency_key));
    END IF;
    -- 12. TraceContextInvalid.
    IF trace <> '{}' THEN
        n := (SELECT count(*) FROM jsonb_object_keys(trace));
        IF n > (lim ->> 'max_trace_entries')::bigint THEN
            RETURN _rejection(12, 'trace context has too many entries' || _server_fix('max_trace_entries'),
                              'trace_context', (lim ->> 'max_trace_entries')::bigint, n);
        END IF;
        SELECT min(e.key COLLATE "C") INTO bad_key FROM jsonb_object_keys(trace) e(key) WHERE octet_length(e.key) > 256;
        IF bad_key IS NOT NULL THEN
            RETURN _rejection(12, 'trace context key is too long (a fixed limit: 256 bytes)',
                              'trace_context[' || _clip(bad_key) || ']', 256, octet_length(bad_key));
        END IF;
        n := (lim ->> 'max_trace_value_bytes')::bigint;
        SELECT min(e.key COLLATE "C") INTO bad_key FROM jsonb_each_text(trace) e WHERE octet_length(e.value) > n;
        IF bad_key IS NOT NULL THEN
            RETURN _rejection(12, 'trace context value is too long' || _server_fix('max_trace_value_bytes'),
                              'trace_context[' || _clip(bad_key) || ']', n, octet_length(trace ->> bad_key));
        END IF;
        IF trace ? 'traceparent' AND NOT _traceparent_valid(trace ->> 'traceparent') THEN
            RETURN _rejection(12, 'traceparent is not a valid W3C traceparent', 'trace_context[traceparent]');
        END IF;
    END IF;
    RETURN NULL;
END;
$$;

-- Raise a rejection: SQLSTATE SE0NN (NN: the code's number), message "Name: message", the
-- rejection as JSON in the DETAIL (with the job's index in a batch), a HINT naming the docs.
CREATE FUNCTION _raise(rejection jsonb, idx int) RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    detail jsonb := CASE WHEN idx IS NULL THEN rejection ELSE rejection || jsonb_build_object('index', idx) END;
BEGIN
    RAISE EXCEPTION USING
        ERRCODE = 'SE0' || lpad((rejection ->> 'code'), 2, '0'),
        MESSAGE = (rejection ->> 'name') || ': ' || (rejection ->> 'message')
                  || CASE WHEN idx IS NULL THEN '' ELSE ' (job ' || idx || ' of the batch)' END,
        DETAIL = detail::text,
        HINT = 'sepp refused the job (docs/enqueue-in-transaction.md "Errors"); the transaction is aborted';
END;
$$;

-- The core of enqueue and enqueue_batch: the jobs of one call, one array element each (every
-- array as long as queues; NULL elements are the defaults). Returns one (job_id, deduplicated)
-- per job, in order. Raises the first rejected job's rejection (_raise; nothing stored then).
-- Set-based but for the verdicts (one _check per job; a plain job — queue, job type and
-- payload only — is checked once per (queue, job type, encoding) and then by its size, as a
-- node's plain path does).
CREATE FUNCTION _enqueue(queues text[], job_types text[], payloads bytea[], encodings text[], customs jsonb[],
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
    -- Wake the nodes' long polls (and have them reload the queues when some were created):
    -- the payload their listener reads, sent at commit.
    IF cardinality(ready) > 0 OR cardinality(created) > 0 THEN
        PERFORM pg_notify('sepp_' || current_schema(),
                          jsonb_build_object('o', 'sql', 'q', to_jsonb(ready), 'k', cardinality(created) > 0)::text);
    END IF;
    RETURN QUERY SELECT encode(coalesce(u.d, u.i), 'hex')::uuid, u.d IS NOT NULL
                 FROM unnest(ids, dedup) WITH ORDINALITY AS u(i, d, o) ORDER BY u.o;
END;
$$;

-- One job, in the caller's transaction (docs/enqueue-in-transaction.md).
CREATE FUNCTION enqueue(queue text, job_type text, payload bytea DEFAULT NULL, encoding text DEFAULT '',
                        custom jsonb DEFAULT '{}', priority int DEFAULT NULL, max_attempts int DEFAULT NULL,
                        scheduled_at timestamptz DEFAULT NULL, idempotency_key text DEFAULT NULL,
                        trace_context jsonb DEFAULT '{}', OUT job_id uuid, OUT deduplicated boolean)
    LANGUAGE plpgsql SECURITY DEFINER AS $$
BEGIN
    SELECT e.job_id, e.deduplicated INTO enqueue.job_id, enqueue.deduplicated
    FROM _enqueue(ARRAY[queue], ARRAY[job_type], ARRAY[payload], ARRAY[encoding], ARRAY[custom],
                  ARRAY[priority], ARRAY[max_attempts], ARRAY[scheduled_at], ARRAY[idempotency_key],
                  ARRAY[trace_context], false) e;
END;
$$;

-- Many jobs, one array element each (every array as long as queues, or NULL for the
-- defaults), all or nothing: the first rejected job raises, with its index in the DETAIL.
-- Returns (idx from 0, job_id, deduplicated) per job, in order.
CREATE FUNCTION enqueue_batch(queues text[], job_types text[], payloads bytea[] DEFAULT NULL,
                              encodings text[] DEFAULT NULL, customs jsonb[] DEFAULT NULL,
                              priorities int[] DEFAULT NULL, max_attempts int[] DEFAULT NULL,
                              scheduled_ats timestamptz[] DEFAULT NULL, idempotency_keys text[] DEFAULT NULL,
                              trace_contexts jsonb[] DEFAULT NULL)
    RETURNS TABLE (idx int, job_id uuid, deduplicated boolean) LANGUAGE sql SECURITY DEFINER
    BEGIN ATOMIC
        SELECT (e.n - 1)::int, e.job_id, e.deduplicated
        FROM _enqueue(queues, job_types, payloads, encodings, customs, priorities, max_attempts, scheduled_ats,
                      idempotency_keys, trace_contexts, true) WITH ORDINALITY AS e(job_id, deduplicated, n)
        ORDER BY e.n;
    END;

-- What a client needs to validate a job before calling enqueue (the Python helpers do):
-- strict mode, the server-wide limits, the queue defaults' limits, the count of queues, and
-- the stored settings of each queue of `names` that exists.
CREATE FUNCTION admission_limits(names text[]) RETURNS jsonb LANGUAGE sql STABLE SECURITY DEFINER
    RETURN (SELECT jsonb_build_object(
                'strict', a.strict, 'limits', a.limits, 'queue_defaults', a.queue_defaults::jsonb,
                'queue_count', (SELECT count(*) FROM queues),
                'queues', coalesce((SELECT jsonb_object_agg(q.name, q.settings::jsonb) FROM queues q
                                    WHERE q.name = ANY (names)), '{}'))
            FROM admission a);

-- Fixed search_path (this schema, then pg_temp: nothing of the caller's can shadow a table)
-- and no EXECUTE for PUBLIC on anything of this version.
DO $$
DECLARE
    f regprocedure;
    nm text;
BEGIN
    FOR f, nm IN SELECT p.oid::regprocedure, p.proname FROM pg_proc p
             WHERE p.pronamespace = current_schema()::regnamespace
               AND p.proname IN ('enqueue', 'enqueue_batch', 'admission_limits', '_enqueue', '_check', '_raise',
                                 '_rejection', '_server_fix', '_queue_fix', '_traceparent_valid', '_py_repr',
                                 '_utf8_head', '_clip', '_quote', '_py_float', '_custom_kind', '_custom_scalar', '_custom_float',
                                 '_custom_text', '_pb_varint', '_pb_bytes', '_pb_custom_value', '_pb_extras') LOOP
        IF nm IN ('enqueue', 'enqueue_batch', 'admission_limits') THEN  -- the SECURITY DEFINER ones
            EXECUTE format('ALTER FUNCTION %s SET search_path = %I, pg_temp', f, current_schema());
        END IF;
        EXECUTE format('REVOKE ALL ON FUNCTION %s FROM PUBLIC', f);
    END LOOP;
END;
$$;
