//! The wire types, generated at build time from the repository's `proto/` by `build.rs`.
#![allow(missing_docs, clippy::all)]

/// Google's rich error model (`google.rpc.Status`, `ErrorInfo`, `RetryInfo`, …).
pub mod google_rpc {
    include!(concat!(env!("OUT_DIR"), "/google.rpc.rs"));
}

/// sepp's API, package `sepp.api.v1`.
pub mod sepp_v1 {
    include!(concat!(env!("OUT_DIR"), "/sepp.api.v1.rs"));
}
