//! TLS and mutual TLS against live `sepp serve` processes: the pytest wrapper
//! (tests/rust/test_rust_client.py) makes a throw-away CA with `cryptography`
//! (tests/support/tls.py: `ca.pem`, `client.pem`/`client.key` signed by it, `other-ca.pem`
//! and a stranger's `stranger.pem`/`stranger.key` signed by that other CA, a server
//! certificate for `localhost` and `127.0.0.1`) and starts a TLS server
//! (`SEPP_RS_TLS_TARGET`) and one requiring a client certificate (`SEPP_RS_MTLS_TARGET`).
#![cfg(feature = "tls")]

mod common;

use std::path::PathBuf;
use std::time::Duration;

use sepp_rs::{Client, ClientBuilder, EnqueueRequest, Error, TransportErrorKind, Worker};

fn pki(file: &str) -> PathBuf {
    PathBuf::from(common::env("SEPP_RS_TLS_DIR")).join(file)
}

fn quick(target: String) -> ClientBuilder {
    Client::builder(target).timeout(Duration::from_secs(10)).retry(sepp_rs::RetryPolicy::disabled())
}

fn connect_error(result: Result<Client, Error>) -> String {
    let err = result.expect_err("the connection should have been refused");
    let transport = err.transport().unwrap_or_else(|| panic!("not a transport error: {err}"));
    assert!(transport.not_sent(), "a failed TLS handshake sent nothing: {err}");
    err.to_string()
}

#[tokio::test]
async fn a_tls_server_is_reached_with_its_ca_and_a_job_enqueued() {
    let client = quick(common::env("SEPP_RS_TLS_TARGET")).tls_ca(pki("ca.pem")).connect().await.unwrap();
    let queue = common::fresh_queue("rs-tls");
    let ack = client.enqueue(EnqueueRequest::new(queue.as_str(), "tls").unwrap()).await.unwrap();
    assert!(!ack.deduplicated);
    let results = client.enqueue_batch([EnqueueRequest::new(queue.as_str(), "tls").unwrap()]).await.unwrap();
    assert!(results[0].is_ok(), "{results:?}");
}

#[tokio::test]
async fn a_target_given_as_an_ip_address_is_checked_against_tls_server_name() {
    let target = common::env("SEPP_RS_TLS_TARGET").replace("localhost", "127.0.0.1");
    let refused = quick(target.clone()).tls_ca(pki("ca.pem")).build().unwrap_err().to_string();
    assert!(refused.contains("TLS to an IP address (127.0.0.1) cannot be verified"), "{refused}");
    let client = quick(target).tls_ca(pki("ca.pem")).tls_server_name("localhost").connect().await.unwrap();
    client.get_server_info().await.unwrap();
}

#[tokio::test]
async fn a_server_certificate_from_another_ca_fails_the_handshake_and_says_why() {
    let message = connect_error(quick(common::env("SEPP_RS_TLS_TARGET")).tls_ca(pki("other-ca.pem")).connect().await);
    assert!(message.contains("TLS handshake failed"), "{message}");
    assert!(message.contains("UnknownIssuer"), "{message}");
    assert!(!message.contains("is sepp running"), "a server that answered TLS is running: {message}");
}

#[tokio::test]
async fn an_https_target_without_a_ca_trusts_the_system_bundle_which_lacks_the_test_ca() {
    let message = connect_error(quick(common::env("SEPP_RS_TLS_TARGET")).connect().await);
    assert!(message.contains("TLS handshake failed") && message.contains("UnknownIssuer"), "{message}");
}

#[tokio::test]
async fn a_plaintext_client_is_not_answered_by_a_tls_server() {
    let plain = common::env("SEPP_RS_TLS_TARGET").replace("https://", "http://");
    let err = quick(plain).connect().await.expect_err("a plaintext client reached a TLS server");
    assert!(err.transport().is_some(), "{err}");
}

#[tokio::test]
async fn mutual_tls_with_the_client_certificate_enqueues_and_a_worker_acks() {
    let builder = || quick(common::env("SEPP_RS_MTLS_TARGET")).tls_ca(pki("ca.pem"))
        .tls_cert(pki("client.pem")).tls_key(pki("client.key"));
    let client = builder().connect().await.unwrap();
    let queue = common::fresh_queue("rs-mtls");
    let ack = client.enqueue(EnqueueRequest::new(queue.as_str(), "tls").unwrap()).await.unwrap();
    let worker = Worker::from_builder(builder()).unwrap();
    let jobs = worker.reserve([queue.as_str()], 1, Duration::from_secs(5)).await.unwrap();
    assert_eq!(jobs.len(), 1);
    assert_eq!(jobs[0].id, ack.job_id.to_string());
    worker.ack(&jobs[0]).await.unwrap();
}

#[tokio::test]
async fn mutual_tls_without_a_client_certificate_is_refused() {
    let err = quick(common::env("SEPP_RS_MTLS_TARGET")).tls_ca(pki("ca.pem")).connect().await
        .expect_err("a client without a certificate reached a server requiring one");
    assert_eq!(err.transport().map(|t| t.kind()), Some(TransportErrorKind::Unavailable), "{err}");
    assert!(err.to_string().contains("it may require a client certificate (tls_cert/tls_key)"), "{err}");
}

#[tokio::test]
async fn mutual_tls_with_a_strangers_certificate_is_refused() {
    let err = quick(common::env("SEPP_RS_MTLS_TARGET")).tls_ca(pki("ca.pem"))
        .tls_cert(pki("stranger.pem")).tls_key(pki("stranger.key")).connect().await
        .expect_err("a stranger's certificate was accepted");
    assert_eq!(err.transport().map(|t| t.kind()), Some(TransportErrorKind::Unavailable), "{err}");
    assert!(err.to_string().contains("it may require a client certificate (tls_cert/tls_key)"), "{err}");
}

#[tokio::test]
async fn a_key_file_that_is_not_a_key_is_refused_before_dialling() {
    let err = quick(common::env("SEPP_RS_MTLS_TARGET")).tls_ca(pki("ca.pem"))
        .tls_cert(pki("client.pem")).tls_key(pki("client.pem")).build().unwrap_err().to_string();
    assert!(err.contains("tls_key: ") && err.contains("client.pem is not a PEM private key"), "{err}");
}
