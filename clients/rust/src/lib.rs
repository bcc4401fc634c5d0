//! `sepp_rs`: the Rust client of the sepp job-queue server.
//!
//! A producer connects a [`Client`], builds an [`EnqueueRequest`] (a queue and a job type,
//! plus optional knobs) and sends it with [`Client::enqueue`], [`Client::enqueue_batch`]
//! (best effort, one result per job) or [`Client::enqueue_atomic`] (all or nothing).
//! Requests are validated locally against the limits the server advertises
//! ([`Client::get_server_info`]) with the server's own rules and order, so a refusal
//! ([`Rejection`], a catalogue [`RejectionCode`]) costs no round trip.
//!
//! ```no_run
//! use sepp_rs::{Client, EnqueueRequest, Payload, Priority};
//!
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! let client = Client::connect("http://127.0.0.1:7700").await?;
//! let request = EnqueueRequest::new("emails", "welcome")?
//!     .with_payload(Payload::new(br#"{"user_id": 42}"#.to_vec(), "application/json"))
//!     .with_priority(Priority::P7)
//!     .with_idempotency_key("welcome-user-42");
//! let ack = client.enqueue(request).await?;
//! println!("enqueued {}", ack.job_id);
//! # Ok(()) }
//! ```
//!
//! Errors come in two families that never mix: a [`Rejection`] (deterministic: fix the
//! request) and a [`TransportError`] (no verdict: see [`TransportError::may_be_stored`]).
//! A worker reserves jobs with [`Worker`] and acks or nacks them. The transport is a
//! small unary gRPC layer over `h2` ([`grpc`]); docs/rust-client.md has the whole page.
#![warn(missing_docs)]

mod builder;
mod client;
mod error;
pub mod grpc;
mod info;
pub mod proto;
mod quoting;
mod rejection;
mod request;
mod retry;
pub mod validation;
mod worker;

pub use builder::{ClientBuilder, TOKEN_ENV};
pub use client::Client;
pub use error::{AtomicEnqueueError, Error, TransportError, TransportErrorKind};
pub use info::{PersistMode, QueueInfo, QueueLimits, QueueSettings, ServerInfo, ServerLimits};
pub use rejection::{IndexedRejection, Rejection, RejectionCode};
pub use request::{CustomValue, EnqueueAck, EnqueueRequest, Payload, Priority};
pub use retry::RetryPolicy;
pub use worker::{LeaseExtension, NackDirective, NackOutcome, ReservedJob, Worker};
