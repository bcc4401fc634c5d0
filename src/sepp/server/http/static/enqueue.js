// sepp enqueue form: custom-entry rows and the browser-side checks of the advertised limits.
//
// The checks mirror sepp.validation (the rejection catalogue, docs/errors.md) and run in the catalogue's
// order, so the code shown here is the one the server would send. They use the limits the
// server advertises (GetServerInfo), embedded in #sepp-limits. "Send without checking"
// submits anyway, to see the server's own verdict.
"use strict";

(function () {
  var form = document.getElementById("enqueue-form");
  if (!form) { return; }
  var LIMITS = JSON.parse(document.getElementById("sepp-limits").textContent);
  var encoder = new TextEncoder();
  var QUEUE_RE = /^[A-Za-z0-9][A-Za-z0-9._:-]*$/;
  var CONTROL_RE = /[\u0000-\u001f\u007f-\u009f]/;
  var TRACEPARENT_RE = /^([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(-.*)?$/;
  var INT64_MIN = BigInt("-9223372036854775808"), INT64_MAX = BigInt("9223372036854775807");

  function bytes(text) { return encoder.encode(text).length; }
  function $(id) { return document.getElementById(id); }

  // ------------------------------------------------------------ custom rows
  var rows = $("custom-rows"), template = $("custom-row-template");
  $("add-custom").addEventListener("click", function () {
    var row = template.content.firstElementChild.cloneNode(true);
    rows.appendChild(row);
    row.querySelector("input").focus();
  });
  rows.addEventListener("click", function (event) {
    var button = event.target.closest(".remove-row");
    if (!button) { return; }
    var row = button.closest(".custom-row");
    if (rows.children.length > 1) { row.remove(); $("add-custom").focus(); }
    else { row.querySelectorAll("input").forEach(function (i) { i.value = ""; }); }
  });

  // ------------------------------------------------------------ time zone default
  var tz = $("scheduled_tz");
  if (tz.dataset.default === "UTC" && !$("scheduled_at").value) {
    try {
      var local = Intl.DateTimeFormat().resolvedOptions().timeZone;
      if (local && Array.prototype.some.call(tz.options, function (o) { return o.value === local; })) { tz.value = local; }
    } catch (e) { /* keep UTC */ }
  }

  // ------------------------------------------------------------ payload size
  function payloadBytes() {
    var text = $("payload").value, fmt = $("payload_format").value;
    if (fmt === "base64") {
      var b = text.replace(/\s+/g, "");
      if (!/^[A-Za-z0-9+/]*={0,2}$/.test(b) || b.length % 4 !== 0) { return { error: "the payload is not valid base64" }; }
      return { n: b.length / 4 * 3 - (b.endsWith("==") ? 2 : b.endsWith("=") ? 1 : 0) };
    }
    if (fmt === "hex") {
      var h = text.replace(/\s+/g, "");
      if (!/^[0-9a-fA-F]*$/.test(h) || h.length % 2 !== 0) { return { error: "the payload is not valid hex" }; }
      return { n: h.length / 2 };
    }
    return { n: bytes(text) };
  }

  function queueLimits(name) {
    if (Object.prototype.hasOwnProperty.call(LIMITS.queues, name)) { return LIMITS.queues[name]; }
    return LIMITS.strict ? null : LIMITS.defaults;
  }

  function showSize() {
    var p = payloadBytes(), lim = queueLimits($("queue").value) || LIMITS.defaults;
    $("payload-size").textContent = p.error ? p.error :
      p.n.toLocaleString() + " of " + lim.max_payload_bytes.toLocaleString() + " bytes allowed";
  }
  ["input", "change"].forEach(function (ev) {
    $("payload").addEventListener(ev, showSize);
    $("payload_format").addEventListener(ev, showSize);
    $("queue").addEventListener(ev, showSize);
  });
  showSize();

  // ------------------------------------------------------------ zoned time → epoch ms
  function zoneOffsetMs(epochMs, zone) {
    var parts = new Intl.DateTimeFormat("en-US", { timeZone: zone, hourCycle: "h23", year: "numeric",
      month: "2-digit", day: "2-digit", hour: "2-digit", minute: "2-digit", second: "2-digit" }).formatToParts(new Date(epochMs));
    var f = {};
    parts.forEach(function (p) { f[p.type] = p.value; });
    var asUtc = Date.UTC(+f.year, +f.month - 1, +f.day, +f.hour, +f.minute, +f.second);
    return asUtc - Math.floor(epochMs / 1000) * 1000;
  }
  function zonedToEpochMs(local, zone) {
    var m = /^(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2})(?::(\d{2}))?/.exec(local);
    if (!m) { return NaN; }
    var guess = Date.UTC(+m[1], +m[2] - 1, +m[3], +m[4], +m[5], +(m[6] || 0));
    var first = guess - zoneOffsetMs(guess, zone);
    return guess - zoneOffsetMs(first, zone);
  }

  // ------------------------------------------------------------ the checks
  function reject(code, message, field, limit, actual) {
    return { code: code, message: message, field: field, limit: limit, actual: actual };
  }

  function customEntries() {
    var out = [];
    rows.querySelectorAll(".custom-row").forEach(function (row) {
      var key = row.querySelector("[name=custom_key]").value;
      var type = row.querySelector("[name=custom_type]").value;
      var raw = row.querySelector("[name=custom_value]").value;
      if (key || raw) { out.push({ key: key, type: type, raw: raw }); }
    });
    return out;
  }

  function valueSize(entry) {
    if (entry.type === "string") { return bytes(entry.raw); }
    return entry.type === "bool" ? 1 : 8;
  }

  function check() {
    var S = LIMITS.server;
    var queue = $("queue").value, jobType = $("job_type").value;
    var encoding = $("encoding").value;
    var maxAttempts = $("max_attempts").value.trim();
    var custom = customEntries();
    // 1. InvalidArgument: malformed fields.
    if (maxAttempts) {
      if (!/^-?\d+$/.test(maxAttempts)) { return reject("InvalidArgument", "'" + maxAttempts + "' is not an integer", "max_attempts"); }
      var ma = parseInt(maxAttempts, 10);
      if (ma < 1 || ma > S.max_attempts_ceiling) {
        return reject("InvalidArgument", "max_attempts must be between 1 and " + S.max_attempts_ceiling, "max_attempts",
          ma < 1 ? 1 : S.max_attempts_ceiling, ma);
      }
    }
    if (bytes(encoding) > S.max_encoding_bytes) {
      return reject("InvalidArgument", "payload encoding label is too long", "payload.encoding", S.max_encoding_bytes, bytes(encoding));
    }
    var p = payloadBytes();
    if (p.error) { return reject("InvalidArgument", p.error, "payload.data"); }
    var malformed = [];
    custom.forEach(function (e) {
      var field = "custom[" + e.key + "]";
      if (!e.key) { malformed.push(reject("InvalidArgument", "custom key is empty", field)); return; }
      if (e.type === "int") {
        if (!/^\s*[-+]?\d+\s*$/.test(e.raw)) { malformed.push(reject("InvalidArgument", "'" + e.raw + "' is not an integer", field)); return; }
        var big = BigInt(e.raw.trim());
        if (big < INT64_MIN || big > INT64_MAX) { malformed.push(reject("InvalidArgument", e.raw + " does not fit in int64", field)); }
      } else if (e.type === "float") {
        var t = e.raw.trim(), f = Number(t);
        if (/^[-+]?(nan|inf|infinity)$/i.test(t) || (t !== "" && !Number.isNaN(f) && !Number.isFinite(f))) {
          malformed.push(reject("InvalidArgument", "custom value '" + e.key + "' is not a finite float", field));
        } else if (t === "" || Number.isNaN(f)) {
          malformed.push(reject("InvalidArgument", "'" + e.raw + "' is not a number", field));
        }
      } else if (e.type === "bool" && ["true", "false", "1", "0", "yes", "no", "on", "off"].indexOf(e.raw.trim().toLowerCase()) < 0) {
        malformed.push(reject("InvalidArgument", "'" + e.raw + "' is not a boolean (true/false)", field));
      }
    });
    if (malformed.length) { return malformed[0]; }
    // 2. QueueNameInvalid.
    if (!queue) { return reject("QueueNameInvalid", "queue name is empty", "queue"); }
    if (bytes(queue) > S.max_queue_name_bytes) { return reject("QueueNameInvalid", "queue name is too long", "queue", S.max_queue_name_bytes, bytes(queue)); }
    if (!QUEUE_RE.test(queue)) { return reject("QueueNameInvalid", "queue name must match [A-Za-z0-9][A-Za-z0-9._:-]*", "queue"); }
    // 3. JobTypeInvalid.
    if (!jobType) { return reject("JobTypeInvalid", "job type is empty", "job_type"); }
    if (bytes(jobType) > S.max_job_type_bytes) { return reject("JobTypeInvalid", "job type is too long", "job_type", S.max_job_type_bytes, bytes(jobType)); }
    if (CONTROL_RE.test(jobType)) { return reject("JobTypeInvalid", "job type contains control characters", "job_type"); }
    // 4. UnknownQueue.
    var lim = queueLimits(queue);
    if (!lim) { return reject("UnknownQueue", "queue '" + queue + "' is not declared (strict mode)", "queue"); }
    // 5. PayloadTooLarge.
    if (p.n > lim.max_payload_bytes) { return reject("PayloadTooLarge", "payload is larger than the queue's max_payload_bytes", "payload.data", lim.max_payload_bytes, p.n); }
    // 6. EncodingNotAllowed.
    if (lim.allowed_encodings.length && lim.allowed_encodings.indexOf(encoding) < 0) {
      return reject("EncodingNotAllowed", "encoding '" + encoding + "' is not allowed on this queue", "payload.encoding");
    }
    // 7–9. Custom map bounds (a repeated key keeps its last value, as in the request map).
    var map = {};
    custom.forEach(function (e) { map[e.key] = e; });
    var keys = Object.keys(map).sort();
    if (keys.length > lim.max_custom_entries) { return reject("CustomEntriesTooMany", "custom map has too many entries", "custom", lim.max_custom_entries, keys.length); }
    var total = 0, tooLong = null;
    keys.forEach(function (k) {
      if (bytes(k) > lim.max_custom_key_bytes && tooLong === null) { tooLong = k; }
      total += bytes(k) + valueSize(map[k]);
    });
    if (tooLong !== null) { return reject("CustomKeyTooLong", "custom key is too long", "custom[" + tooLong + "]", lim.max_custom_key_bytes, bytes(tooLong)); }
    if (total > lim.max_custom_bytes) { return reject("CustomMapTooLarge", "custom map is larger than max_custom_bytes", "custom", lim.max_custom_bytes, total); }
    // 10. ScheduledTooFar.
    var when = $("scheduled_at").value;
    if (when) {
      var at = zonedToEpochMs(when, $("scheduled_tz").value);
      var ahead = (at - Date.now()) / 1000;
      if (ahead > S.max_schedule_horizon) {
        return reject("ScheduledTooFar", "scheduled_at is further ahead than max_schedule_horizon", "scheduled_at", S.max_schedule_horizon, Math.ceil(ahead));
      }
    }
    // 11. IdempotencyKeyTooLong.
    var key = $("idempotency_key").value;
    if (bytes(key) > S.max_idempotency_key_bytes) { return reject("IdempotencyKeyTooLong", "idempotency key is too long", "idempotency_key", S.max_idempotency_key_bytes, bytes(key)); }
    // 12. TraceContextInvalid.
    var tp = $("traceparent").value.trim(), ts = $("tracestate").value.trim();
    var trace = [["traceparent", tp], ["tracestate", ts]].filter(function (e) { return e[1]; });
    if (trace.length > S.max_trace_entries) { return reject("TraceContextInvalid", "too many trace context entries", "trace_context", S.max_trace_entries, trace.length); }
    for (var i = 0; i < trace.length; i++) {
      if (bytes(trace[i][1]) > S.max_trace_value_bytes) { return reject("TraceContextInvalid", "trace context value is too long", "trace_context[" + trace[i][0] + "]", S.max_trace_value_bytes, bytes(trace[i][1])); }
    }
    if (tp) {
      var m = TRACEPARENT_RE.exec(tp);
      if (!m || m[1] === "ff" || /^0+$/.test(m[2]) || /^0+$/.test(m[3]) || (m[1] === "00" && m[5] !== undefined)) {
        return reject("TraceContextInvalid", "traceparent is not a valid W3C traceparent", "trace_context[traceparent]");
      }
    }
    return null;
  }

  var box = $("client-check");
  function show(r) {
    box.replaceChildren();
    if (!r) { box.hidden = true; return; }
    var head = document.createElement("p");
    var code = document.createElement("strong");
    code.className = "code";
    code.id = "client-code";
    code.textContent = r.code;
    head.append(code, document.createTextNode(": " + r.message + " (checked in the browser; nothing was sent)"));
    box.append(head);
    var details = [];
    if (r.field) { details.push("field " + r.field); }
    if (r.limit !== undefined) { details.push("limit " + r.limit.toLocaleString()); }
    if (r.actual !== undefined) { details.push("actual " + r.actual.toLocaleString()); }
    if (details.length) { var d = document.createElement("p"); d.textContent = details.join(" · "); box.append(d); }
    box.hidden = false;
  }

  form.addEventListener("submit", function (event) {
    if ($("skip_checks").checked) { return; }
    var verdict = check();
    show(verdict);
    if (verdict) { event.preventDefault(); box.focus(); }
  });
  box.tabIndex = -1;
})();
