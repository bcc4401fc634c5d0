//! What a producer sends: an [`EnqueueRequest`] (a queue and a job type, plus optional
//! knobs), its [`Payload`], [`Priority`] and custom values, and the [`EnqueueAck`] that
//! comes back.

use std::collections::BTreeMap;
use std::fmt;
use std::time::{SystemTime, UNIX_EPOCH};

use crate::proto::sepp_v1 as pb;
use crate::proto::sepp_v1::custom_value::Kind;
use crate::rejection::Rejection;
use crate::validation::{check_job_type, check_queue_name};

/// A job body: opaque bytes plus a free-form encoding label (usually a MIME type).
///
/// sepp never interprets either; producer and worker agree on the format. The queue caps
/// `data` at its `max_payload_bytes` (1 MiB by default).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Payload {
    /// The bytes.
    pub data: Vec<u8>,
    /// The encoding label, e.g. `application/json` (≤ 128 bytes by default).
    pub encoding: String,
}

impl Payload {
    /// A payload of `data` labelled `encoding`.
    pub fn new(data: impl Into<Vec<u8>>, encoding: impl Into<String>) -> Payload {
        Payload { data: data.into(), encoding: encoding.into() }
    }

    fn to_proto(&self) -> pb::Payload {
        pb::Payload { data: self.data.clone(), encoding: self.encoding.clone(), ..Default::default() }
    }
}

/// A job's priority: `P0` (lowest) to `P9` (highest). Higher-priority jobs of a queue are
/// handed out first.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[allow(missing_docs)]
pub enum Priority {
    P0, P1, P2, P3, P4, P5, P6, P7, P8, P9,
}

impl Priority {
    /// The priority of `value` (0–9), or `None` outside that range.
    pub fn new(value: u8) -> Option<Priority> {
        use Priority::*;
        [P0, P1, P2, P3, P4, P5, P6, P7, P8, P9].get(value as usize).copied()
    }

    /// Its number, 0–9.
    pub fn value(self) -> u8 {
        self as u8
    }
}

/// One typed value of the custom map: a string, a 64-bit integer, a 64-bit float or a
/// bool. Built from Rust values with `From`: `&str`/`String`, `i8`–`i64`, `u8`–`u32`,
/// `f32`/`f64`, `bool`.
#[derive(Clone, Debug, PartialEq)]
pub enum CustomValue {
    /// UTF-8 text (its size counts in UTF-8 bytes).
    String(String),
    /// int64 end to end (size 8).
    Int(i64),
    /// float64 (size 8); NaN and ±inf are refused (`InvalidArgument`).
    Float(f64),
    /// A bool (size 1).
    Bool(bool),
}

impl CustomValue {
    /// The wire `CustomValue`.
    pub fn to_proto(&self) -> pb::CustomValue {
        let kind = match self {
            CustomValue::String(s) => Kind::StringValue(s.clone()),
            CustomValue::Int(i) => Kind::IntValue(*i),
            CustomValue::Float(f) => Kind::FloatValue(*f),
            CustomValue::Bool(b) => Kind::BoolValue(*b),
        };
        pb::CustomValue { kind: Some(kind), ..Default::default() }
    }

    /// From the wire; `None` for a value with no type.
    pub fn from_proto(value: &pb::CustomValue) -> Option<CustomValue> {
        Some(match value.kind.as_ref()? {
            Kind::StringValue(s) => CustomValue::String(s.clone()),
            Kind::IntValue(i) => CustomValue::Int(*i),
            Kind::FloatValue(f) => CustomValue::Float(*f),
            Kind::BoolValue(b) => CustomValue::Bool(*b),
            #[allow(unreachable_patterns)] // a kind a newer proto adds
            _ => return None,
        })
    }
}

macro_rules! custom_from {
    ($variant:ident, $via:ty: $($t:ty),*) => {
        $(impl From<$t> for CustomValue {
            fn from(value: $t) -> Self {
                CustomValue::$variant(<$via>::from(value))
            }
        })*
    };
}
custom_from!(Int, i64: i8, i16, i32, i64, u8, u16, u32);
custom_from!(Float, f64: f32, f64);
custom_from!(Bool, bool: bool);
custom_from!(String, String: &str, String, &String);

/// One job to enqueue: a queue and a job type, plus optional knobs. The same building
/// block serves `enqueue`, `enqueue_batch` and `enqueue_atomic`.
///
/// [`EnqueueRequest::new`] checks the queue name and job type rules that need no server
/// limit (empty, characters); everything else — lengths, payload size, the custom map,
/// the schedule horizon — is checked against the server's advertised limits when the
/// request is sent (the client validates locally first, then the server does again).
#[derive(Clone, Debug, PartialEq)]
pub struct EnqueueRequest {
    queue: String,
    job_type: String,
    payload: Option<Payload>,
    custom: BTreeMap<String, CustomValue>,
    priority: Option<Priority>,
    max_attempts: Option<i32>,
    scheduled_at: Option<SystemTime>,
    idempotency_key: Option<String>,
    trace_context: BTreeMap<String, String>,
}

impl EnqueueRequest {
    /// A request for `queue` (`[A-Za-z0-9._:-]`, first a letter or digit) of `job_type`
    /// (no control characters), nothing else set.
    ///
    /// Errors: a `Rejection` — `QueueNameInvalid` for an empty name or a character outside
    /// the rule, else `JobTypeInvalid` for an empty job type or one with control
    /// characters — the same verdict the server would give.
    pub fn new(queue: impl Into<String>, job_type: impl Into<String>) -> Result<EnqueueRequest, Rejection> {
        let (queue, job_type) = (queue.into(), job_type.into());
        if let Some(rejection) = check_queue_name(&queue).or_else(|| check_job_type(&job_type)) {
            return Err(rejection);
        }
        Ok(EnqueueRequest {
            queue,
            job_type,
            payload: None,
            custom: BTreeMap::new(),
            priority: None,
            max_attempts: None,
            scheduled_at: None,
            idempotency_key: None,
            trace_context: BTreeMap::new(),
        })
    }

    /// With `payload` as the job's body.
    pub fn with_payload(mut self, payload: Payload) -> Self {
        self.payload = Some(payload);
        self
    }

    /// With a priority override (default: the queue's).
    pub fn with_priority(mut self, priority: Priority) -> Self {
        self.priority = Some(priority);
        self
    }

    /// With a max-attempts override: deliveries before dead-letter, 1 up to the server's
    /// ceiling (1,000 by default); checked when sent.
    pub fn with_max_attempts(mut self, max_attempts: i32) -> Self {
        self.max_attempts = Some(max_attempts);
        self
    }

    /// With one custom entry added (or replaced): a string, integer, float or bool.
    pub fn with_custom_entry(mut self, key: impl Into<String>, value: impl Into<CustomValue>) -> Self {
        self.custom.insert(key.into(), value.into());
        self
    }

    /// Scheduled for `when`: the job stays invisible to workers until then (a time not in
    /// the future means ready now). At most the server's `max_schedule_horizon` ahead.
    pub fn with_scheduled_at(mut self, when: SystemTime) -> Self {
        self.scheduled_at = Some(when);
        self
    }

    /// With a dedup key, unique per queue within its dedup window: a retried enqueue with
    /// the same key returns the original job (`deduplicated`). An empty key is no key.
    pub fn with_idempotency_key(mut self, key: impl Into<String>) -> Self {
        let key = key.into();
        self.idempotency_key = if key.is_empty() { None } else { Some(key) };
        self
    }

    /// With W3C trace context entries (`traceparent`, `tracestate`), replacing any before.
    pub fn with_trace_context<K: Into<String>, V: Into<String>>(mut self, entries: impl IntoIterator<Item = (K, V)>) -> Self {
        self.trace_context = entries.into_iter().map(|(k, v)| (k.into(), v.into())).collect();
        self
    }

    /// The target queue.
    pub fn queue(&self) -> &str {
        &self.queue
    }

    /// The job type.
    pub fn job_type(&self) -> &str {
        &self.job_type
    }

    /// The payload, if set.
    pub fn payload(&self) -> Option<&Payload> {
        self.payload.as_ref()
    }

    /// The custom map.
    pub fn custom(&self) -> &BTreeMap<String, CustomValue> {
        &self.custom
    }

    /// The idempotency key, if set.
    pub fn idempotency_key(&self) -> Option<&str> {
        self.idempotency_key.as_deref()
    }

    /// The wire `EnqueueRequest`: exactly what the client validates and sends.
    pub fn to_proto(&self) -> pb::EnqueueRequest {
        pb::EnqueueRequest {
            queue: self.queue.clone(),
            job_type: self.job_type.clone(),
            payload: self.payload.as_ref().map(Payload::to_proto),
            custom: self.custom.iter().map(|(k, v)| (k.clone(), v.to_proto())).collect(),
            priority: self.priority.map(|p| p.value() as i32),
            max_attempts: self.max_attempts,
            scheduled_at: self.scheduled_at.map(timestamp),
            idempotency_key: self.idempotency_key.clone().unwrap_or_default(),
            trace_context: self.trace_context.clone(),
            ..Default::default()
        }
    }
}

/// A `SystemTime` as a `google.protobuf.Timestamp` (UTC), before the epoch too.
pub fn timestamp(when: SystemTime) -> prost_types::Timestamp {
    match when.duration_since(UNIX_EPOCH) {
        Ok(d) => prost_types::Timestamp { seconds: d.as_secs() as i64, nanos: d.subsec_nanos() as i32 },
        Err(e) => {
            let d = e.duration();
            let (mut seconds, mut nanos) = (-(d.as_secs() as i64), -(d.subsec_nanos() as i32));
            if nanos < 0 {
                seconds -= 1;
                nanos += 1_000_000_000;
            }
            prost_types::Timestamp { seconds, nanos }
        }
    }
}

/// A job the server stored durably, or matched by idempotency key.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct EnqueueAck {
    /// The server-assigned id (a UUIDv7); displays in the canonical hyphenated form.
    pub job_id: uuid::Uuid,
    /// True when the idempotency key matched a job already enqueued in the queue's dedup
    /// window: `job_id` is then the original job and nothing new was stored.
    pub deduplicated: bool,
}

impl fmt::Display for EnqueueAck {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.deduplicated {
            write!(f, "{} (deduplicated)", self.job_id)
        } else {
            write!(f, "{}", self.job_id)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn new_checks_the_names_rules_that_need_no_server_limit() {
        assert!(EnqueueRequest::new("emails", "welcome").is_ok());
        let r = EnqueueRequest::new("bad queue", "").unwrap_err();
        assert_eq!((r.code.name(), r.field.as_str()), ("QueueNameInvalid", "queue"));
        let r = EnqueueRequest::new("q", "a\tb").unwrap_err();
        assert_eq!((r.code.name(), r.field.as_str()), ("JobTypeInvalid", "job_type"));
        // Lengths depend on the server's limits: checked when sent.
        assert!(EnqueueRequest::new("q".repeat(500), "t").is_ok());
    }

    #[test]
    fn every_knob_lands_in_the_wire_request() {
        let at = UNIX_EPOCH + Duration::new(1_700_000_000, 5);
        let msg = EnqueueRequest::new("emails", "welcome").unwrap()
            .with_payload(Payload::new(b"{}".to_vec(), "application/json"))
            .with_priority(Priority::P7)
            .with_max_attempts(5)
            .with_custom_entry("user_id", 42)
            .with_custom_entry("locale", "en-US")
            .with_custom_entry("vip", true)
            .with_custom_entry("score", 0.5)
            .with_scheduled_at(at)
            .with_idempotency_key("k")
            .with_trace_context([("traceparent", "tp")])
            .to_proto();
        assert_eq!(msg.payload.unwrap().encoding, "application/json");
        assert_eq!((msg.priority, msg.max_attempts), (Some(7), Some(5)));
        assert_eq!(msg.custom["user_id"].kind, Some(Kind::IntValue(42)));
        assert_eq!(msg.custom["vip"].kind, Some(Kind::BoolValue(true)));
        assert_eq!(msg.scheduled_at, Some(prost_types::Timestamp { seconds: 1_700_000_000, nanos: 5 }));
        assert_eq!((msg.idempotency_key.as_str(), msg.trace_context["traceparent"].as_str()), ("k", "tp"));
    }

    #[test]
    fn a_time_before_the_epoch_keeps_positive_nanos() {
        let t = timestamp(UNIX_EPOCH - Duration::new(1, 250_000_000));
        assert_eq!((t.seconds, t.nanos), (-2, 750_000_000));
        assert_eq!(Priority::new(9), Some(Priority::P9));
        assert_eq!(Priority::new(10), None);
    }
}
