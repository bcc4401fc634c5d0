//! A small unary gRPC client over `h2`: the transport of [`crate::Client`] and
//! [`crate::Worker`].
//!
//! It exists because tonic is not packaged for the Debian release this crate builds
//! from offline (docs/decisions.md, "The Rust client's gRPC layer"), and is to be replaced
//! by tonic where a registry offers it. It does what sepp's unary RPCs need and no more:
//! HTTP/2 POST with `content-type: application/grpc`, the 5-byte message prefix,
//! `grpc-timeout`, and the `grpc-status` / `grpc-message` / `grpc-status-details-bin`
//! trailers decoded into the rich-error model ([`Status`]); plaintext or TLS ([`tls`], cargo
//! feature `tls`). No compression, no streaming.

pub mod channel;
pub mod codec;
pub mod status;
pub mod tls;

pub use channel::{CallError, Channel, ChannelOptions};
pub use status::{Code, Status};
pub use tls::{TlsConnector, TlsFiles};
