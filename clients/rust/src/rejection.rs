//! The rejection catalogue: a deterministic refusal of one job, with its stable code.
//!
//! A rejection means the server (or the client, checking the same rules locally)
//! understood the request and refused it; sending it again fails the same way, so fix
//! the request rather than retry. The codes and their order are the catalogue of
//! docs/errors.md.

use std::fmt;

use crate::proto::sepp_v1 as pb;

/// The stable catalogue codes, in validation order (the first failing check wins).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum RejectionCode {
    /// A malformed request: priority outside 0–9, `max_attempts` below 1 or above the
    /// server's ceiling, an encoding label too long, a non-finite float or an empty key in
    /// the custom map, a timestamp out of range, an empty or over-cap batch.
    InvalidArgument,
    /// The queue name is empty, too long, has a character outside `[A-Za-z0-9._:-]` or does
    /// not start with a letter or digit.
    QueueNameInvalid,
    /// The job type is empty, too long (UTF-8 bytes) or contains control characters.
    JobTypeInvalid,
    /// Strict mode and the queue is not declared.
    UnknownQueue,
    /// The payload's data is larger than the queue's `max_payload_bytes`.
    PayloadTooLarge,
    /// The queue restricts encodings and the payload's label is not among them.
    EncodingNotAllowed,
    /// The custom map has more entries than `max_custom_entries`.
    CustomEntriesTooMany,
    /// A custom key is longer than `max_custom_key_bytes` (UTF-8 bytes).
    CustomKeyTooLong,
    /// The custom map's size is over `max_custom_bytes`.
    CustomMapTooLarge,
    /// `scheduled_at` is further ahead than the server's `max_schedule_horizon`.
    ScheduledTooFar,
    /// The idempotency key is longer than `max_idempotency_key_bytes`.
    IdempotencyKeyTooLong,
    /// The trace context has too many entries, a key or value too long, or an invalid
    /// W3C `traceparent`.
    TraceContextInvalid,
}

impl RejectionCode {
    /// Every code, in validation order.
    pub const ALL: [RejectionCode; 12] = [
        RejectionCode::InvalidArgument, RejectionCode::QueueNameInvalid, RejectionCode::JobTypeInvalid,
        RejectionCode::UnknownQueue, RejectionCode::PayloadTooLarge, RejectionCode::EncodingNotAllowed,
        RejectionCode::CustomEntriesTooMany, RejectionCode::CustomKeyTooLong, RejectionCode::CustomMapTooLarge,
        RejectionCode::ScheduledTooFar, RejectionCode::IdempotencyKeyTooLong, RejectionCode::TraceContextInvalid,
    ];

    /// The catalogue name users see: `PayloadTooLarge`.
    pub fn name(self) -> &'static str {
        use RejectionCode::*;
        match self {
            InvalidArgument => "InvalidArgument", QueueNameInvalid => "QueueNameInvalid",
            JobTypeInvalid => "JobTypeInvalid", UnknownQueue => "UnknownQueue", PayloadTooLarge => "PayloadTooLarge",
            EncodingNotAllowed => "EncodingNotAllowed", CustomEntriesTooMany => "CustomEntriesTooMany",
            CustomKeyTooLong => "CustomKeyTooLong", CustomMapTooLarge => "CustomMapTooLarge",
            ScheduledTooFar => "ScheduledTooFar", IdempotencyKeyTooLong => "IdempotencyKeyTooLong",
            TraceContextInvalid => "TraceContextInvalid",
        }
    }

    /// The UPPER_SNAKE_CASE wire form (`ErrorInfo.reason`, the proto enum name):
    /// `PAYLOAD_TOO_LARGE`.
    pub fn reason(self) -> &'static str {
        use RejectionCode::*;
        match self {
            InvalidArgument => "INVALID_ARGUMENT", QueueNameInvalid => "QUEUE_NAME_INVALID",
            JobTypeInvalid => "JOB_TYPE_INVALID", UnknownQueue => "UNKNOWN_QUEUE",
            PayloadTooLarge => "PAYLOAD_TOO_LARGE", EncodingNotAllowed => "ENCODING_NOT_ALLOWED",
            CustomEntriesTooMany => "CUSTOM_ENTRIES_TOO_MANY", CustomKeyTooLong => "CUSTOM_KEY_TOO_LONG",
            CustomMapTooLarge => "CUSTOM_MAP_TOO_LARGE", ScheduledTooFar => "SCHEDULED_TOO_FAR",
            IdempotencyKeyTooLong => "IDEMPOTENCY_KEY_TOO_LONG", TraceContextInvalid => "TRACE_CONTEXT_INVALID",
        }
    }

    /// The proto `RejectionCode` number (1 for `InvalidArgument` … 12).
    pub fn to_wire(self) -> i32 {
        Self::ALL.iter().position(|c| *c == self).map_or(0, |i| i as i32 + 1)
    }

    /// The code of a proto number; `None` for 0 or a number this client does not know.
    pub fn from_wire(number: i32) -> Option<RejectionCode> {
        if number < 1 {
            return None;
        }
        Self::ALL.get(number as usize - 1).copied()
    }

    /// The code of an UPPER_SNAKE_CASE reason or a catalogue name, if it is one.
    pub fn from_name(name: &str) -> Option<RejectionCode> {
        Self::ALL.iter().copied().find(|c| c.reason() == name || c.name() == name)
    }
}

impl fmt::Display for RejectionCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A deterministic refusal of one job: fix the request, don't retry.
///
/// Displays as the Python client's does:
/// `PayloadTooLarge: payload is larger than … (field payload.data, limit 1048576, actual 2000000)`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rejection {
    /// The catalogue code.
    pub code: RejectionCode,
    /// Human-readable explanation (with how to raise a limit, where one applies).
    pub message: String,
    /// The request field at fault (`payload.data`, `custom[user_id]`), or "".
    pub field: String,
    /// The limit crossed, when the check has one (bytes, entries or seconds).
    pub limit: Option<i64>,
    /// The measured value, in the unit of `limit`.
    pub actual: Option<i64>,
}

impl Rejection {
    /// A rejection with a code, message and field (no limit or actual).
    pub fn new(code: RejectionCode, message: impl Into<String>, field: impl Into<String>) -> Rejection {
        Rejection { code, message: message.into(), field: field.into(), limit: None, actual: None }
    }

    /// The same rejection with `limit` and `actual`.
    pub fn with_limit(mut self, limit: i64, actual: i64) -> Rejection {
        self.limit = Some(limit);
        self.actual = Some(actual);
        self
    }

    /// Build from a wire `Rejection`. A code this client does not know (a newer server)
    /// becomes `InvalidArgument` with the number kept in the message.
    pub fn from_proto(msg: &pb::Rejection) -> Rejection {
        let (code, message) = match RejectionCode::from_wire(msg.code) {
            Some(code) => (code, msg.message.clone()),
            None => (RejectionCode::InvalidArgument, format!("[unknown rejection code {}] {}", msg.code, msg.message)),
        };
        Rejection { code, message, field: msg.field.clone(), limit: msg.limit, actual: msg.actual }
    }

    /// The wire `Rejection`.
    pub fn to_proto(&self) -> pb::Rejection {
        pb::Rejection {
            code: self.code.to_wire(),
            message: self.message.clone(),
            field: self.field.clone(),
            limit: self.limit,
            actual: self.actual,
            ..Default::default()
        }
    }
}

impl fmt::Display for Rejection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.message.is_empty() {
            write!(f, "{}", self.code)?;
        } else {
            write!(f, "{}: {}", self.code, self.message)?;
        }
        let mut details = Vec::new();
        if !self.field.is_empty() {
            details.push(format!("field {}", self.field));
        }
        if let Some(limit) = self.limit {
            details.push(format!("limit {limit}"));
        }
        if let Some(actual) = self.actual {
            details.push(format!("actual {actual}"));
        }
        if !details.is_empty() {
            write!(f, " ({})", details.join(", "))?;
        }
        Ok(())
    }
}

impl std::error::Error for Rejection {}

/// A rejection tagged with the 0-based index of its job in the call (request order).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IndexedRejection {
    /// The job's index in the batch.
    pub index: usize,
    /// Why it was refused.
    pub rejection: Rejection,
}

impl IndexedRejection {
    /// Build from a wire `IndexedRejection` (a missing rejection reads as an empty
    /// `InvalidArgument`).
    pub fn from_proto(msg: &pb::IndexedRejection) -> IndexedRejection {
        let rejection = msg.rejection.as_ref().map(Rejection::from_proto)
            .unwrap_or_else(|| Rejection::new(RejectionCode::InvalidArgument, "", ""));
        IndexedRejection { index: msg.index as usize, rejection }
    }
}

impl fmt::Display for IndexedRejection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "job {}: {}", self.index, self.rejection)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_map_to_wire_numbers_names_and_reasons_both_ways() {
        for (i, code) in RejectionCode::ALL.iter().enumerate() {
            assert_eq!(code.to_wire(), i as i32 + 1);
            assert_eq!(RejectionCode::from_wire(i as i32 + 1), Some(*code));
            assert_eq!(RejectionCode::from_name(code.reason()), Some(*code));
            assert_eq!(RejectionCode::from_name(code.name()), Some(*code));
        }
        assert_eq!(RejectionCode::from_wire(0), None);
        assert_eq!(RejectionCode::from_wire(13), None);
        assert_eq!(RejectionCode::CustomMapTooLarge.reason(), "CUSTOM_MAP_TOO_LARGE");
    }

    #[test]
    fn a_rejection_displays_as_the_python_clients_does() {
        let r = Rejection::new(RejectionCode::PayloadTooLarge, "payload is larger", "payload.data").with_limit(10, 11);
        assert_eq!(r.to_string(), "PayloadTooLarge: payload is larger (field payload.data, limit 10, actual 11)");
        assert_eq!(Rejection::new(RejectionCode::UnknownQueue, "", "").to_string(), "UnknownQueue");
        let indexed = IndexedRejection { index: 3, rejection: Rejection::new(RejectionCode::QueueNameInvalid, "bad", "queue") };
        assert_eq!(indexed.to_string(), "job 3: QueueNameInvalid: bad (field queue)");
    }

    #[test]
    fn an_unknown_wire_code_reads_as_invalid_argument_and_keeps_its_number() {
        let r = Rejection::from_proto(&pb::Rejection { code: 99, message: "new".into(), ..Default::default() });
        assert_eq!((r.code, r.message.as_str()), (RejectionCode::InvalidArgument, "[unknown rejection code 99] new"));
        let back = Rejection::new(RejectionCode::ScheduledTooFar, "m", "scheduled_at").with_limit(1, 2);
        assert_eq!(Rejection::from_proto(&back.to_proto()), back);
    }
}
