//! Local validation: the server's checks, in the catalogue's fixed order, on the wire
//! request this client is about to send — so a local verdict equals the server's (same
//! limits, same clock). A port of the Python client's `sepp.validation.Validator`,
//! message for message; where several custom or trace keys fail the same check the
//! smallest key (by code point) is reported, as there.

use crate::info::{QueueLimits, ServerLimits};
use crate::proto::sepp_v1 as pb;
use crate::proto::sepp_v1::custom_value::Kind;
use crate::quoting::{clip, quote, QUOTE_LIMIT};
use crate::rejection::{Rejection, RejectionCode as C};

/// Longest trace-context key, UTF-8 bytes: fixed, not configurable.
pub const MAX_TRACE_KEY_BYTES: usize = 256;
/// google.protobuf.Timestamp's valid range, seconds since the epoch (years 1 to 9999).
const TS_MIN: i64 = -62_135_596_800;
const TS_MAX: i64 = 253_402_300_799;

/// The end of a message refusing a job for a queue setting: how to raise it.
fn queue_fix(queue: &str, flag: &str) -> String {
    format!("; to raise it: sepp queues declare {} --{flag} N", clip(queue, QUOTE_LIMIT))
}

/// The end of a message refusing a job for a server-wide limit: where to raise it.
pub(crate) fn server_fix(key: &str) -> String {
    format!("; to raise it: set [limits] {key} in the server's config (SEPP_LIMITS__{})", key.to_uppercase())
}

fn reject(code: C, message: impl Into<String>, field: impl Into<String>) -> Rejection {
    Rejection::new(code, message, field)
}

/// Whether `name` is a valid queue name apart from its length: `[A-Za-z0-9][A-Za-z0-9._:-]*`.
pub fn queue_name_chars_valid(name: &str) -> bool {
    let mut bytes = name.bytes();
    match bytes.next() {
        Some(b) if b.is_ascii_alphanumeric() => bytes.all(|b| b.is_ascii_alphanumeric() || b"._:-".contains(&b)),
        _ => false,
    }
}

/// Whether `text` holds a control character (U+0000–U+001F, U+007F–U+009F).
pub fn has_control(text: &str) -> bool {
    text.chars().any(|c| matches!(c as u32, 0..=0x1f | 0x7f..=0x9f))
}

/// W3C Trace Context `traceparent` check (version 00; future versions tolerated).
pub fn traceparent_valid(value: &str) -> bool {
    let b = value.as_bytes();
    let hex = |s: &[u8]| s.iter().all(|c| matches!(c, b'0'..=b'9' | b'a'..=b'f'));
    if b.len() < 55 || !hex(&b[0..2]) || b[2] != b'-' || !hex(&b[3..35]) || b[35] != b'-' || !hex(&b[36..52])
        || b[52] != b'-' || !hex(&b[53..55]) {
        return false;
    }
    let rest = &b[55..];
    if !rest.is_empty() && (rest[0] != b'-' || rest.contains(&b'\n')) {
        return false;
    }
    let (version, trace, span) = (&value[0..2], &value[3..35], &value[36..52]);
    if version == "ff" || trace.bytes().all(|c| c == b'0') || span.bytes().all(|c| c == b'0') {
        return false;
    }
    !(version == "00" && !rest.is_empty())
}

/// The checks of the queue name alone (emptiness and characters; the length needs the
/// server's limit): `None` when they pass.
pub fn check_queue_name(queue: &str) -> Option<Rejection> {
    if queue.is_empty() {
        return Some(reject(C::QueueNameInvalid, "queue name is empty", "queue"));
    }
    if !queue_name_chars_valid(queue) {
        return Some(reject(C::QueueNameInvalid, "queue name must match [A-Za-z0-9][A-Za-z0-9._:-]*", "queue"));
    }
    None
}

/// The checks of the job type alone (emptiness and control characters).
pub fn check_job_type(job_type: &str) -> Option<Rejection> {
    if job_type.is_empty() {
        return Some(reject(C::JobTypeInvalid, "job type is empty", "job_type"));
    }
    if has_control(job_type) {
        return Some(reject(C::JobTypeInvalid, "job type contains control characters", "job_type"));
    }
    None
}

/// Size of one custom value: UTF-8 bytes for a string, 8 for int and float, 1 for bool.
pub fn custom_value_size(value: &pb::CustomValue) -> usize {
    match &value.kind {
        Some(Kind::StringValue(s)) => s.len(),
        Some(Kind::BoolValue(_)) => 1,
        _ => 8,
    }
}

/// The first failing check's rejection (catalogue order), or `None` when `req` passes.
///
/// `queue_limits` looks the queue up (its limits, or `None` for an unknown queue in
/// strict mode); it is consulted only once checks 1–3 passed. `now_ns` is the current
/// time, UTC nanoseconds since the epoch, for `ScheduledTooFar`.
pub fn validate<'a>(req: &pb::EnqueueRequest, limits: &ServerLimits,
                   queue_limits: &dyn Fn(&str) -> Option<&'a QueueLimits>, now_ns: i128) -> Option<Rejection> {
    // 1. InvalidArgument: malformed fields.
    if let Some(p) = req.priority {
        if !(0..=9).contains(&p) {
            return Some(reject(C::InvalidArgument, "priority must be between 0 and 9", "priority")
                .with_limit(if p < 0 { 0 } else { 9 }, p as i64));
        }
    }
    if let Some(m) = req.max_attempts {
        let ceiling = limits.max_attempts_ceiling;
        if !(1..=ceiling).contains(&(m as i64)) {
            let fix = if m < 1 { String::new() } else { server_fix("max_attempts_ceiling") };
            return Some(reject(C::InvalidArgument, format!("max_attempts must be between 1 and {ceiling}{fix}"), "max_attempts")
                .with_limit(if m < 1 { 1 } else { ceiling }, m as i64));
        }
    }
    let empty = pb::Payload::default();
    let payload = req.payload.as_ref().unwrap_or(&empty);
    let encoding = payload.encoding.as_str();
    if encoding.len() as i64 > limits.max_encoding_bytes {
        return Some(reject(C::InvalidArgument, format!("payload encoding label is too long{}", server_fix("max_encoding_bytes")),
                           "payload.encoding").with_limit(limits.max_encoding_bytes, encoding.len() as i64));
    }
    if encoding.contains('\0') {
        return Some(reject(C::InvalidArgument, "payload encoding label contains a NUL character (U+0000)", "payload.encoding"));
    }
    if let Some(bad) = first_malformed_custom(req) {
        return Some(bad);
    }
    if let Some(ts) = &req.scheduled_at {
        if !((TS_MIN..=TS_MAX).contains(&ts.seconds) && (0..1_000_000_000).contains(&ts.nanos)) {
            return Some(reject(C::InvalidArgument, "scheduled_at is not a valid timestamp", "scheduled_at"));
        }
    }
    // 2. QueueNameInvalid.
    let queue = req.queue.as_str();
    if queue.is_empty() {
        return Some(reject(C::QueueNameInvalid, "queue name is empty", "queue"));
    }
    if queue.len() as i64 > limits.max_queue_name_bytes {
        return Some(reject(C::QueueNameInvalid, format!("queue name is too long{}", server_fix("max_queue_name_bytes")), "queue")
            .with_limit(limits.max_queue_name_bytes, queue.len() as i64));
    }
    if let Some(bad) = check_queue_name(queue) {
        return Some(bad);
    }
    // 3. JobTypeInvalid.
    let job_type = req.job_type.as_str();
    if job_type.is_empty() {
        return Some(reject(C::JobTypeInvalid, "job type is empty", "job_type"));
    }
    if job_type.len() as i64 > limits.max_job_type_bytes {
        return Some(reject(C::JobTypeInvalid, format!("job type is too long{}", server_fix("max_job_type_bytes")), "job_type")
            .with_limit(limits.max_job_type_bytes, job_type.len() as i64));
    }
    if let Some(bad) = check_job_type(job_type) {
        return Some(bad);
    }
    // 4. UnknownQueue.
    let qlim = match queue_limits(queue) {
        Some(qlim) => qlim,
        None => return Some(reject(C::UnknownQueue, format!("queue {} is not declared (strict mode)", quote(queue, QUOTE_LIMIT)),
                                   "queue")),
    };
    // 5. PayloadTooLarge.
    let size = payload.data.len() as i64;
    if size > qlim.max_payload_bytes {
        return Some(reject(C::PayloadTooLarge, format!("payload is larger than the queue's max_payload_bytes{}",
                                                        queue_fix(queue, "max-payload-bytes")), "payload.data")
            .with_limit(qlim.max_payload_bytes, size));
    }
    // 6. EncodingNotAllowed.
    if !qlim.allowed_encodings.is_empty() && !qlim.allowed_encodings.iter().any(|e| e == encoding) {
        return Some(reject(C::EncodingNotAllowed,
                           format!("encoding {} is not allowed on this queue; to allow it: sepp queues declare {} \
                                    --allowed-encoding LABEL (once per label it takes, '*' for any)",
                                   quote(encoding, QUOTE_LIMIT), clip(queue, QUOTE_LIMIT)), "payload.encoding"));
    }
    // 7–9. Custom map bounds.
    if !req.custom.is_empty() {
        if let Some(bad) = custom_bounds(req, qlim, queue) {
            return Some(bad);
        }
    }
    // 10. ScheduledTooFar.
    if let Some(ts) = &req.scheduled_at {
        let at_ns = ts.seconds as i128 * 1_000_000_000 + ts.nanos as i128;
        let horizon = limits.max_schedule_horizon;
        if at_ns > now_ns + horizon.as_nanos() as i128 {
            let ahead = at_ns - now_ns;
            let ahead_s = (ahead + 999_999_999).div_euclid(1_000_000_000);
            return Some(reject(C::ScheduledTooFar, format!("scheduled_at is further ahead than max_schedule_horizon{}",
                                                            server_fix("max_schedule_horizon")), "scheduled_at")
                .with_limit(horizon.as_secs() as i64, ahead_s as i64));
        }
    }
    // 11. IdempotencyKeyTooLong.
    let key = req.idempotency_key.as_str();
    if !key.is_empty() {
        if key.len() as i64 > limits.max_idempotency_key_bytes {
            return Some(reject(C::IdempotencyKeyTooLong, format!("idempotency key is too long{}",
                                                                  server_fix("max_idempotency_key_bytes")), "idempotency_key")
                .with_limit(limits.max_idempotency_key_bytes, key.len() as i64));
        }
        if key.contains('\0') {
            return Some(reject(C::InvalidArgument, "idempotency key contains a NUL character (U+0000)", "idempotency_key"));
        }
    }
    // 12. TraceContextInvalid.
    if !req.trace_context.is_empty() {
        return trace_rejection(req, limits);
    }
    None
}

fn first_malformed_custom(req: &pb::EnqueueRequest) -> Option<Rejection> {
    // The map is ordered, so the first bad key is the smallest (as the server reports it).
    for (key, value) in &req.custom {
        let message = if key.is_empty() {
            "custom key is empty".to_string()
        } else {
            match &value.kind {
                None => format!("custom value {} has no type", quote(key, QUOTE_LIMIT)),
                Some(Kind::FloatValue(f)) if !f.is_finite() => format!("custom value {} is not a finite float", quote(key, QUOTE_LIMIT)),
                _ => continue,
            }
        };
        return Some(reject(C::InvalidArgument, message, format!("custom[{}]", clip(key, QUOTE_LIMIT))));
    }
    None
}

fn custom_bounds(req: &pb::EnqueueRequest, qlim: &QueueLimits, queue: &str) -> Option<Rejection> {
    let count = req.custom.len() as i64;
    if count > qlim.max_custom_entries {
        return Some(reject(C::CustomEntriesTooMany, format!("custom map has too many entries{}",
                                                             queue_fix(queue, "max-custom-entries")), "custom")
            .with_limit(qlim.max_custom_entries, count));
    }
    let mut total: i64 = 0;
    let mut too_long: Option<&str> = None;
    for (key, value) in &req.custom {
        if key.len() as i64 > qlim.max_custom_key_bytes && too_long.is_none() {
            too_long = Some(key);
        }
        total += (key.len() + custom_value_size(value)) as i64;
    }
    if let Some(key) = too_long {
        return Some(reject(C::CustomKeyTooLong, format!("custom key is too long{}", queue_fix(queue, "max-custom-key-bytes")),
                           format!("custom[{}]", clip(key, QUOTE_LIMIT)))
            .with_limit(qlim.max_custom_key_bytes, key.len() as i64));
    }
    if total > qlim.max_custom_bytes {
        return Some(reject(C::CustomMapTooLarge, format!("custom map is larger than max_custom_bytes{}",
                                                          queue_fix(queue, "max-custom-bytes")), "custom")
            .with_limit(qlim.max_custom_bytes, total));
    }
    None
}

fn trace_rejection(req: &pb::EnqueueRequest, limits: &ServerLimits) -> Option<Rejection> {
    let trace = &req.trace_context;
    let count = trace.len() as i64;
    if count > limits.max_trace_entries {
        return Some(reject(C::TraceContextInvalid, format!("trace context has too many entries{}", server_fix("max_trace_entries")),
                           "trace_context").with_limit(limits.max_trace_entries, count));
    }
    if let Some(key) = trace.keys().find(|k| k.len() > MAX_TRACE_KEY_BYTES) {
        return Some(reject(C::TraceContextInvalid,
                           format!("trace context key is too long (a fixed limit: {MAX_TRACE_KEY_BYTES} bytes)"),
                           format!("trace_context[{}]", clip(key, QUOTE_LIMIT)))
            .with_limit(MAX_TRACE_KEY_BYTES as i64, key.len() as i64));
    }
    if let Some((key, value)) = trace.iter().find(|(_, v)| v.len() as i64 > limits.max_trace_value_bytes) {
        return Some(reject(C::TraceContextInvalid, format!("trace context value is too long{}", server_fix("max_trace_value_bytes")),
                           format!("trace_context[{}]", clip(key, QUOTE_LIMIT)))
            .with_limit(limits.max_trace_value_bytes, value.len() as i64));
    }
    if let Some(parent) = trace.get("traceparent") {
        if !traceparent_valid(parent) {
            return Some(reject(C::TraceContextInvalid, "traceparent is not a valid W3C traceparent", "trace_context[traceparent]"));
        }
    }
    None
}

/// The batch-level `InvalidArgument` for an empty or over-cap batch, else `None`.
pub fn batch_size_rejection(count: usize, max_batch: i64) -> Option<Rejection> {
    if count >= 1 && count as i64 <= max_batch {
        return None;
    }
    let message = if count < 1 {
        "a batch needs at least one job".to_string()
    } else {
        format!("a batch holds at most {max_batch} jobs{}", server_fix("max_enqueue_batch"))
    };
    Some(reject(C::InvalidArgument, message, "jobs").with_limit(max_batch, count as i64))
}

#[cfg(test)]
mod tests {
    use super::*;

    const TP: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    #[test]
    fn traceparent_follows_w3c_trace_context() {
        let cases = [
            (TP.to_string(), true),
            ("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00".into(), true),
            ("cc-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-more-fields".into(), true),
            ("00-00000000000000000000000000000000-00f067aa0ba902b7-01".into(), false),
            ("00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01".into(), false),
            ("ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01".into(), false),
            (TP.to_uppercase(), false),
            (format!("{TP}-extra"), false),
            (TP[..TP.len() - 1].to_string(), false),
            (format!("{TP}0"), false),
            ("00_4bf92f3577b34da6a3ce929d0e0e4736_00f067aa0ba902b7_01".into(), false),
            (String::new(), false),
            (format!(" {TP}"), false),
            ("cc-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-a\nb".into(), false),
        ];
        for (value, valid) in cases {
            assert_eq!(traceparent_valid(&value), valid, "{value:?}");
        }
    }

    #[test]
    fn queue_names_and_job_types_follow_the_catalogue_rules() {
        for ok in ["q", "Az09._:-x", "0-queue"] {
            assert!(check_queue_name(ok).is_none(), "{ok}");
        }
        for bad in ["", ".", "..", "-x", ":x", "_x", "a b", "a/b", "café", "a\n"] {
            assert_eq!(check_queue_name(bad).map(|r| r.code), Some(C::QueueNameInvalid), "{bad:?}");
        }
        assert!(check_job_type("send email → user 😀").is_none());
        assert!(check_job_type("a\u{a0}b").is_none());
        for bad in ["", "a\0b", "a\tb", "del\x7f", "c1\u{85}", "a\u{9f}"] {
            assert_eq!(check_job_type(bad).map(|r| r.code), Some(C::JobTypeInvalid), "{bad:?}");
        }
    }

    #[test]
    fn an_empty_or_over_cap_batch_is_invalid_argument_on_field_jobs() {
        assert!(batch_size_rejection(1, 256).is_none() && batch_size_rejection(256, 256).is_none());
        let over = batch_size_rejection(257, 256).unwrap();
        assert_eq!((over.code, over.field.as_str(), over.limit, over.actual), (C::InvalidArgument, "jobs", Some(256), Some(257)));
        assert_eq!(batch_size_rejection(0, 256).unwrap().message, "a batch needs at least one job");
    }
}
