//! A call's gRPC status and its rich-error details: `grpc-status`, `grpc-message` and the
//! `google.rpc.Status` of `grpc-status-details-bin`, unpacked into the details sepp sends
//! (`ErrorInfo`, `RetryInfo`, a `Rejection`, `AtomicRejections`).

use std::fmt;
use std::time::Duration;

use prost::Message;

use crate::grpc::codec::{base64_decode, percent_decode};
use crate::proto::google_rpc;
use crate::proto::sepp_v1;

/// gRPC status codes (the numbers of `google.rpc.Code`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Code {
    /// 0: not an error.
    Ok,
    /// 1: the call was cancelled.
    Cancelled,
    /// 2: an error without a better code.
    Unknown,
    /// 3: the request is malformed.
    InvalidArgument,
    /// 4: the deadline passed first.
    DeadlineExceeded,
    /// 5: something named does not exist.
    NotFound,
    /// 6: it exists already.
    AlreadyExists,
    /// 7: the caller may not do this.
    PermissionDenied,
    /// 8: a quota or size limit was hit.
    ResourceExhausted,
    /// 9: the system is not in a state that allows it.
    FailedPrecondition,
    /// 10: aborted (a concurrency conflict).
    Aborted,
    /// 11: outside a valid range.
    OutOfRange,
    /// 12: the server does not implement the method.
    Unimplemented,
    /// 13: a server bug.
    Internal,
    /// 14: the service is unavailable (transient).
    Unavailable,
    /// 15: data loss.
    DataLoss,
    /// 16: no or bad credentials.
    Unauthenticated,
}

impl Code {
    /// The code of number `n`; numbers gRPC does not define are `Unknown`.
    pub fn from_i32(n: i32) -> Code {
        use Code::*;
        match n {
            0 => Ok, 1 => Cancelled, 3 => InvalidArgument, 4 => DeadlineExceeded, 5 => NotFound,
            6 => AlreadyExists, 7 => PermissionDenied, 8 => ResourceExhausted, 9 => FailedPrecondition,
            10 => Aborted, 11 => OutOfRange, 12 => Unimplemented, 13 => Internal, 14 => Unavailable,
            15 => DataLoss, 16 => Unauthenticated, _ => Unknown,
        }
    }

    /// The UPPER_SNAKE_CASE name gRPC gives the code (`INVALID_ARGUMENT`).
    pub fn name(self) -> &'static str {
        use Code::*;
        match self {
            Ok => "OK", Cancelled => "CANCELLED", Unknown => "UNKNOWN", InvalidArgument => "INVALID_ARGUMENT",
            DeadlineExceeded => "DEADLINE_EXCEEDED", NotFound => "NOT_FOUND", AlreadyExists => "ALREADY_EXISTS",
            PermissionDenied => "PERMISSION_DENIED", ResourceExhausted => "RESOURCE_EXHAUSTED",
            FailedPrecondition => "FAILED_PRECONDITION", Aborted => "ABORTED", OutOfRange => "OUT_OF_RANGE",
            Unimplemented => "UNIMPLEMENTED", Internal => "INTERNAL", Unavailable => "UNAVAILABLE",
            DataLoss => "DATA_LOSS", Unauthenticated => "UNAUTHENTICATED",
        }
    }
}

impl fmt::Display for Code {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

const ERROR_INFO: &str = "type.googleapis.com/google.rpc.ErrorInfo";
const RETRY_INFO: &str = "type.googleapis.com/google.rpc.RetryInfo";
const REJECTION: &str = "type.googleapis.com/sepp.api.v1.Rejection";
const ATOMIC: &str = "type.googleapis.com/sepp.api.v1.AtomicRejections";

/// A failed call's status: code, message and the rich-error details the server packed
/// into `grpc-status-details-bin` (those this client knows; others are ignored).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Status {
    /// The gRPC code (from `grpc-status`).
    pub code: Option<Code>,
    /// The message: the packed `google.rpc.Status`'s when it has one, else `grpc-message`.
    pub message: String,
    /// The `google.rpc.ErrorInfo` detail, when the server sent one.
    pub error_info: Option<google_rpc::ErrorInfo>,
    /// The `google.rpc.RetryInfo` detail (load shedding: how long to wait).
    pub retry_info: Option<google_rpc::RetryInfo>,
    /// A packed `sepp.api.v1.Rejection` (a rejected single enqueue).
    pub rejection: Option<sepp_v1::Rejection>,
    /// A packed `sepp.api.v1.AtomicRejections` (a refused atomic batch).
    pub atomic: Option<sepp_v1::AtomicRejections>,
}

impl Status {
    /// The status of `grpc-status` (a decimal number), `grpc-message` (percent-encoded) and
    /// `grpc-status-details-bin` (base64 of a `google.rpc.Status`), each as the raw header
    /// bytes when present. Details that cannot be decoded are left out (the code and message
    /// still tell what happened).
    pub fn from_headers(status: &[u8], message: Option<&[u8]>, details: Option<&[u8]>) -> Status {
        let code = std::str::from_utf8(status).ok().and_then(|s| s.trim().parse::<i32>().ok()).map(Code::from_i32);
        let mut out = Status { code: Some(code.unwrap_or(Code::Unknown)), ..Status::default() };
        out.message = message.map(percent_decode).unwrap_or_default();
        if let Some(raw) = details.and_then(|d| base64_decode(d).ok()) {
            if let Ok(packed) = google_rpc::Status::decode(&raw[..]) {
                out.absorb(packed);
            }
        }
        out
    }

    /// Take the message and the known details of a decoded `google.rpc.Status`.
    pub fn absorb(&mut self, packed: google_rpc::Status) {
        if !packed.message.is_empty() {
            self.message = packed.message;
        }
        for any in packed.details {
            let value = &any.value[..];
            match any.type_url.as_str() {
                ERROR_INFO => self.error_info = google_rpc::ErrorInfo::decode(value).ok(),
                RETRY_INFO => self.retry_info = google_rpc::RetryInfo::decode(value).ok(),
                REJECTION => self.rejection = sepp_v1::Rejection::decode(value).ok(),
                ATOMIC => self.atomic = sepp_v1::AtomicRejections::decode(value).ok(),
                _ => {}
            }
        }
    }

    /// The gRPC code (`Unknown` when the answer had none).
    pub fn code(&self) -> Code {
        self.code.unwrap_or(Code::Unknown)
    }

    /// The ErrorInfo reason when the detail is in sepp's domain (or names none), else "".
    pub fn reason(&self) -> &str {
        match &self.error_info {
            Some(info) if info.domain == "sepp" || info.domain.is_empty() => &info.reason,
            _ => "",
        }
    }

    /// One ErrorInfo metadata value (sepp's domain only).
    pub fn metadata(&self, key: &str) -> Option<&str> {
        match &self.error_info {
            Some(info) if !self.reason().is_empty() => info.metadata.get(key).map(String::as_str),
            _ => None,
        }
    }

    /// The RetryInfo delay, when the server sent one.
    pub fn retry_delay(&self) -> Option<Duration> {
        let delay = self.retry_info.as_ref()?.retry_delay.as_ref()?;
        if delay.seconds < 0 || delay.nanos < 0 {
            return Some(Duration::ZERO);
        }
        Some(Duration::new(delay.seconds as u64, delay.nanos as u32))
    }
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.message.is_empty() {
            write!(f, "{}", self.code())
        } else {
            write!(f, "{}: {}", self.code(), self.message)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b64(raw: &[u8]) -> Vec<u8> {
        const A: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
        let mut out = Vec::new();
        for chunk in raw.chunks(3) {
            let n = chunk.iter().fold(0u32, |acc, &b| (acc << 8) | b as u32) << (8 * (3 - chunk.len()));
            for i in 0..=chunk.len() {
                out.push(A[((n >> (18 - 6 * i)) & 63) as usize]);
            }
        }
        out
    }

    fn pack<M: Message>(url: &str, m: &M) -> prost_types::Any {
        prost_types::Any { type_url: url.to_string(), value: m.encode_to_vec() }
    }

    #[test]
    fn codes_round_trip_by_number_and_unknown_numbers_are_unknown() {
        for n in 0..=16 {
            let code = Code::from_i32(n);
            assert!(n == 2 || code != Code::Unknown, "{n}");
        }
        assert_eq!(Code::from_i32(99), Code::Unknown);
        assert_eq!(Code::from_i32(3).to_string(), "INVALID_ARGUMENT");
    }

    #[test]
    fn the_packed_status_gives_message_error_info_retry_info_and_rejection() {
        let info = google_rpc::ErrorInfo {
            reason: "PAYLOAD_TOO_LARGE".into(),
            domain: "sepp".into(),
            metadata: [("limit".to_string(), "10".to_string())].into_iter().collect(),
            ..Default::default()
        };
        let retry = google_rpc::RetryInfo { retry_delay: Some(prost_types::Duration { seconds: 1, nanos: 500_000_000 }), ..Default::default() };
        let rejection = sepp_v1::Rejection { code: 5, message: "big".into(), field: "payload.data".into(), limit: Some(10), actual: Some(11), ..Default::default() };
        let packed = google_rpc::Status {
            code: 3,
            message: "PayloadTooLarge: big".into(),
            details: vec![pack(ERROR_INFO, &info), pack(RETRY_INFO, &retry), pack(REJECTION, &rejection),
                          pack("type.googleapis.com/x.Unknown", &info)],
            ..Default::default()
        };
        let status = Status::from_headers(b"3", Some(b"ignored%20here"), Some(&b64(&packed.encode_to_vec())));
        assert_eq!(status.code(), Code::InvalidArgument);
        assert_eq!(status.message, "PayloadTooLarge: big");
        assert_eq!(status.reason(), "PAYLOAD_TOO_LARGE");
        assert_eq!(status.metadata("limit"), Some("10"));
        assert_eq!(status.retry_delay(), Some(Duration::from_millis(1500)));
        assert_eq!(status.rejection, Some(rejection));
        assert!(status.atomic.is_none());
    }

    #[test]
    fn without_details_the_message_is_grpc_message_and_a_foreign_domain_has_no_reason() {
        let status = Status::from_headers(b"14", Some(b"caf%C3%A9"), None);
        assert_eq!((status.code(), status.message.as_str(), status.reason()), (Code::Unavailable, "café", ""));
        let foreign = google_rpc::Status {
            code: 8,
            message: String::new(),
            details: vec![pack(ERROR_INFO, &google_rpc::ErrorInfo { reason: "X".into(), domain: "other".into(), metadata: Default::default() })],
            ..Default::default()
        };
        let status = Status::from_headers(b"8", Some(b"m"), Some(&b64(&foreign.encode_to_vec())));
        assert_eq!((status.message.as_str(), status.reason()), ("m", ""));
        assert_eq!(Status::from_headers(b"junk", None, Some(b"!!")).code(), Code::Unknown);
    }
}
