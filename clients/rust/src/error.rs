//! The client's errors, in the two families the product keeps apart: a [`Rejection`]
//! (deterministic: fix the request, never retried) and a [`TransportError`] (no per-job
//! verdict was reached: connection, deadline, load, protocol — often transient).

use std::fmt;
use std::time::Duration;

use crate::grpc::{CallError, Code, Status};
use crate::rejection::{IndexedRejection, Rejection, RejectionCode};

/// What kind of transport failure a [`TransportError`] is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TransportErrorKind {
    /// The server is unreachable or the connection dropped (transient).
    Unavailable,
    /// The deadline passed before the server answered; the job may or may not be stored
    /// (transient).
    DeadlineExceeded,
    /// The server is shedding load (commit backlog full); nothing was stored (transient).
    Overloaded,
    /// The request is larger than the gRPC message cap; split it (not transient).
    MessageTooLarge,
    /// No token, or one the server does not know (not transient).
    Unauthenticated,
    /// The token lacks the role the service needs (not transient).
    PermissionDenied,
    /// Anything else: an unexpected status or an answer that is not gRPC (not transient).
    Server,
}

/// A call that reached no per-job verdict.
#[derive(Clone, Debug, PartialEq)]
pub struct TransportError {
    kind: TransportErrorKind,
    message: String,
    code: Option<Code>,
    reason: String,
    not_sent: bool,
    retry_after: Option<Duration>,
}

impl TransportError {
    pub(crate) fn new(kind: TransportErrorKind, message: impl Into<String>) -> TransportError {
        TransportError { kind, message: message.into(), code: None, reason: String::new(), not_sent: false, retry_after: None }
    }

    pub(crate) fn with_code(mut self, code: Code, reason: &str) -> TransportError {
        self.code = Some(code);
        self.reason = reason.to_string();
        self
    }

    pub(crate) fn with_not_sent(mut self, not_sent: bool) -> TransportError {
        self.not_sent = not_sent;
        self
    }

    /// Which failure this is.
    pub fn kind(&self) -> TransportErrorKind {
        self.kind
    }

    /// Whether backing off and retrying is reasonable (safe with an idempotency key).
    pub fn transient(&self) -> bool {
        matches!(self.kind, TransportErrorKind::Unavailable | TransportErrorKind::DeadlineExceeded | TransportErrorKind::Overloaded)
    }

    /// Whether the call provably never reached a server application (no connection could
    /// be made, or the stream was refused unprocessed): sending it again cannot make a
    /// duplicate, idempotency key or not.
    pub fn not_sent(&self) -> bool {
        self.not_sent
    }

    /// Whether the request may have been stored although no verdict came back: false when
    /// it was never sent or the server said it stored nothing (overloaded, too large,
    /// refused credentials); true after a lost connection, a passed deadline or an
    /// unexpected server error.
    pub fn may_be_stored(&self) -> bool {
        !self.not_sent && matches!(self.kind, TransportErrorKind::Unavailable | TransportErrorKind::DeadlineExceeded
                                   | TransportErrorKind::Server)
    }

    /// How long the server asked to wait (`google.rpc.RetryInfo` of an overload).
    pub fn retry_after(&self) -> Option<Duration> {
        self.retry_after
    }

    /// The gRPC status code, when the server answered with one.
    pub fn code(&self) -> Option<Code> {
        self.code
    }

    /// The `ErrorInfo` reason (`OVERLOADED`, `SHUTTING_DOWN`, …), or "".
    pub fn reason(&self) -> &str {
        &self.reason
    }

    /// The message.
    pub fn message(&self) -> &str {
        &self.message
    }
}

impl fmt::Display for TransportError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for TransportError {}

/// The error of `enqueue`, `enqueue_batch`, `get_server_info` and the worker calls.
#[derive(Clone, Debug, PartialEq)]
pub enum Error {
    /// The request was refused deterministically (a catalogue rejection); sending it again
    /// fails the same way.
    Rejected(Rejection),
    /// No verdict was reached; see [`TransportError::transient`] and
    /// [`TransportError::may_be_stored`].
    Transport(TransportError),
    /// The server refused a worker or admin request (a lease that is gone, a job that does
    /// not exist, an invalid argument): `code` the gRPC status, `reason` the ErrorInfo
    /// reason (`LEASE_EXPIRED`, `LEASE_MISMATCH`, `JOB_NOT_FOUND`, …).
    Refused {
        /// The gRPC status code.
        code: Code,
        /// The ErrorInfo reason, or the status name when the answer had none.
        reason: String,
        /// The server's message.
        message: String,
    },
}

impl Error {
    /// The rejection, when this is one.
    pub fn rejection(&self) -> Option<&Rejection> {
        match self {
            Error::Rejected(r) => Some(r),
            _ => None,
        }
    }

    /// The transport error, when this is one.
    pub fn transport(&self) -> Option<&TransportError> {
        match self {
            Error::Transport(t) => Some(t),
            _ => None,
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Rejected(r) => write!(f, "{r}"),
            Error::Transport(t) => write!(f, "{t}"),
            Error::Refused { code, reason, message } => write!(f, "{message} ({code}, {reason})"),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Rejected(r) => Some(r),
            Error::Transport(t) => Some(t),
            Error::Refused { .. } => None,
        }
    }
}

impl From<Rejection> for Error {
    fn from(r: Rejection) -> Self {
        Error::Rejected(r)
    }
}

impl From<TransportError> for Error {
    fn from(t: TransportError) -> Self {
        Error::Transport(t)
    }
}

/// The error of `enqueue_atomic`: nothing was enqueued.
#[derive(Clone, Debug, PartialEq)]
pub enum AtomicEnqueueError {
    /// One or more jobs failed validation, so none were enqueued: every failure, by index
    /// (in index order; a server lists as many as fit its 6 KiB detail).
    Validation(Vec<IndexedRejection>),
    /// The batch as a whole was refused (empty, or more than `max_enqueue_batch` jobs).
    Rejected(Rejection),
    /// Transport or protocol failure; see [`TransportError::may_be_stored`].
    Transport(TransportError),
}

impl fmt::Display for AtomicEnqueueError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AtomicEnqueueError::Validation(errors) => {
                let shown: Vec<String> = errors.iter().take(4).map(|e| e.to_string()).collect();
                write!(f, "atomic batch rejected, nothing enqueued: {}", shown.join("; "))?;
                if errors.len() > 4 {
                    write!(f, "; and {} more", errors.len() - 4)?;
                }
                Ok(())
            }
            AtomicEnqueueError::Rejected(r) => write!(f, "{r}"),
            AtomicEnqueueError::Transport(t) => write!(f, "{t}"),
        }
    }
}

impl std::error::Error for AtomicEnqueueError {}

impl From<Error> for AtomicEnqueueError {
    fn from(e: Error) -> Self {
        match e {
            Error::Rejected(r) => AtomicEnqueueError::Rejected(r),
            Error::Transport(t) => AtomicEnqueueError::Transport(t),
            Error::Refused { code, reason, message } => AtomicEnqueueError::Transport(
                TransportError::new(TransportErrorKind::Server, format!("{message} ({code}, {reason})")).with_code(code, &reason)),
        }
    }
}

/// A failed call, classified (the one decoder of server answers).
#[derive(Clone, Debug)]
pub(crate) enum Failure {
    /// A catalogue rejection.
    Rejected(Rejection),
    /// A refused atomic batch, every failure listed.
    Atomic(Vec<IndexedRejection>),
    /// A refusal of a worker/admin request.
    Refused { code: Code, reason: String, message: String },
    /// No verdict.
    Transport(TransportError),
}

impl Failure {
    pub(crate) fn into_error(self) -> Error {
        match self {
            Failure::Rejected(r) => Error::Rejected(r),
            Failure::Atomic(mut errors) => {
                errors.sort_by_key(|e| e.index);
                Error::Rejected(errors.remove(0).rejection)
            }
            Failure::Refused { code, reason, message } => Error::Refused { code, reason, message },
            Failure::Transport(t) => Error::Transport(t),
        }
    }
}

/// Statuses a worker/admin call reports as `Error::Refused` (a deterministic refusal).
const REFUSALS: [Code; 4] = [Code::NotFound, Code::FailedPrecondition, Code::InvalidArgument, Code::AlreadyExists];

/// Classify a failed call to `target` (as the Python client's `error_from_status`).
pub(crate) fn classify(error: CallError, target: &str) -> Failure {
    use TransportErrorKind as K;
    let status: Status = match error {
        CallError::Connect(m) => {
            return Failure::Transport(TransportError::new(K::Unavailable, format!("server unavailable ({target}): {m}"))
                .with_not_sent(true));
        }
        CallError::NotSent(m) => {
            return Failure::Transport(TransportError::new(K::Unavailable, format!("server unavailable ({target}): {m} \
                (the call was never sent: safe to send again)")).with_not_sent(true));
        }
        CallError::Broken(m) => {
            return Failure::Transport(TransportError::new(K::Unavailable, format!("server unavailable ({target}): the \
                connection was lost after the call was sent ({m}); it may or may not have been processed")));
        }
        CallError::Timeout { sent: true } => {
            return Failure::Transport(TransportError::new(K::DeadlineExceeded, format!("the call's deadline passed before \
                the server answered; the job may or may not be stored ({target})")).with_code(Code::DeadlineExceeded, ""));
        }
        CallError::Timeout { sent: false } => {
            return Failure::Transport(TransportError::new(K::Unavailable, format!("server unavailable ({target}): no \
                connection within the deadline (the call was never sent: safe to send again)")).with_not_sent(true));
        }
        CallError::TooLarge { size, limit } => {
            return Failure::Transport(TransportError::new(K::MessageTooLarge, format!("the request exceeds the gRPC message \
                cap ({target}): {size} bytes, cap {limit}; split it")).with_not_sent(true));
        }
        CallError::Protocol(m) => {
            return Failure::Transport(TransportError::new(K::Server, format!("not a sepp answer ({target}): {m}")));
        }
        CallError::Status(status) => status,
    };
    let code = status.code();
    let reason = status.reason().to_string();
    let message = status.message.clone();
    if matches!(code, Code::Unauthenticated | Code::PermissionDenied) {
        let kind = if code == Code::Unauthenticated { K::Unauthenticated } else { K::PermissionDenied };
        let said = if message.is_empty() { code.name().to_string() } else { message };
        let hint = if said.contains("SEPP_TOKEN") { "" } else { "; check the token (ClientBuilder::token or SEPP_TOKEN)" };
        let reason = if reason.is_empty() { code.name().to_string() } else { reason };
        return Failure::Transport(TransportError::new(kind, format!("{said}{hint}")).with_code(code, &reason).with_not_sent(true));
    }
    if reason == "ATOMIC_BATCH_REJECTED" {
        if let Some(atomic) = &status.atomic {
            let errors: Vec<IndexedRejection> = atomic.rejections.iter().map(IndexedRejection::from_proto).collect();
            if !errors.is_empty() {
                return Failure::Atomic(errors);
            }
        }
    }
    if let Some(rc) = RejectionCode::from_name(&reason).filter(|_| reason.chars().all(|c| c.is_ascii_uppercase() || c == '_')) {
        if let Some(packed) = &status.rejection {
            return Failure::Rejected(Rejection::from_proto(packed));
        }
        let text = message.strip_prefix(&format!("{}: ", rc.name())).unwrap_or(&message).to_string();
        let number = |key: &str| status.metadata(key).and_then(|v| v.parse::<i64>().ok());
        return Failure::Rejected(Rejection {
            code: rc,
            message: text,
            field: status.metadata("field").unwrap_or("").to_string(),
            limit: number("limit"),
            actual: number("actual"),
        });
    }
    if REFUSALS.contains(&code) {
        let reason = if reason.is_empty() { code.name().to_string() } else { reason };
        return Failure::Refused { code, reason, message };
    }
    let t = match code {
        Code::ResourceExhausted if reason == "OVERLOADED" => {
            let mut t = TransportError::new(K::Overloaded, if message.is_empty() { "the server is shedding load (commit \
                backlog full); nothing was stored".to_string() } else { message });
            t.retry_after = status.retry_delay();
            t.not_sent = false;
            t
        }
        Code::ResourceExhausted if status.error_info.is_none() => TransportError::new(K::MessageTooLarge,
            format!("the request exceeds the gRPC message cap ({target}): {message}")),
        Code::Unavailable => TransportError::new(K::Unavailable, format!("server unavailable ({target}): {message}")),
        Code::Cancelled => TransportError::new(K::Unavailable, format!("the server cancelled the call while shutting \
            down ({target})")).with_not_sent(true),
        Code::DeadlineExceeded => TransportError::new(K::DeadlineExceeded, format!("the call's deadline passed before the \
            server answered; the job may or may not be stored ({target})")),
        _ => TransportError::new(K::Server, if message.is_empty() { format!("{code} ({target})") }
                                 else { format!("{code} ({target}): {message}") }),
    };
    let not_sent = t.not_sent;
    Failure::Transport(t.with_code(code, &reason).with_not_sent(not_sent))
}
