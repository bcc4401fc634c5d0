//! What the integration tests share: the live servers' addresses, from the environment
//! the pytest wrapper (tests/rust/test_rust_client.py) sets after starting them.
#![allow(dead_code)]

/// The default server (non-strict, default limits): `SEPP_RS_TARGET`.
pub fn target() -> String {
    env("SEPP_RS_TARGET")
}

/// A strict server that declares no queue: `SEPP_RS_STRICT_TARGET`.
pub fn strict_target() -> String {
    env("SEPP_RS_STRICT_TARGET")
}

/// The server configured as tests/data/validation_cases.json asks: `SEPP_RS_TABLE_TARGET`.
pub fn table_target() -> String {
    env("SEPP_RS_TABLE_TARGET")
}

/// The environment variable `name`; panics, saying how to set it, when it is not set.
pub fn env(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| {
        panic!("{name} is not set: run these tests through pytest tests/rust (it starts the servers), \
                or start `sepp serve` and set {name}=http://HOST:PORT")
    })
}

/// A queue name no other test uses.
pub fn fresh_queue(prefix: &str) -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNT: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos();
    format!("{prefix}-{}-{nanos:x}-{}", std::process::id(), COUNT.fetch_add(1, Ordering::Relaxed))
}

/// A free loopback port nothing listens on (bound, then released).
pub fn unused_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}
