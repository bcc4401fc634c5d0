//! The worker side against a live `sepp serve`: reserve and ack (twice: an ack repeats
//! safely), nack with each directive, extend a lease, a lease that is not the job's, and a
//! long poll that ends empty.

mod common;

use std::time::{Duration, Instant, SystemTime};

use sepp_rs::{Client, EnqueueRequest, Error, NackDirective, Payload, ReservedJob, Worker};

async fn setup() -> (Client, Worker, String) {
    let client = Client::connect(common::target()).await.unwrap();
    let worker = Worker::from_client(client.clone()).with_worker_id("rust-test");
    (client, worker, common::fresh_queue("rs-work"))
}

async fn one(worker: &Worker, queue: &str) -> ReservedJob {
    let mut jobs = worker.reserve([queue], 1, Duration::from_secs(5)).await.unwrap();
    assert_eq!(jobs.len(), 1, "{jobs:?}");
    jobs.remove(0)
}

#[tokio::test]
async fn a_reserved_job_carries_what_was_enqueued_and_an_ack_completes_it_safely_twice() {
    let (client, worker, queue) = setup().await;
    let ack = client.enqueue(EnqueueRequest::new(queue.as_str(), "welcome").unwrap()
        .with_payload(Payload::new(b"{}".to_vec(), "application/json"))
        .with_custom_entry("user_id", 42)).await.unwrap();
    let job = one(&worker, &queue).await;
    assert_eq!((job.id.as_str(), job.job_type.as_str(), job.attempt), (ack.job_id.to_string().as_str(), "welcome", 1));
    assert_eq!(job.payload, Payload::new(b"{}".to_vec(), "application/json"));
    assert_eq!(job.custom["user_id"], sepp_rs::CustomValue::Int(42));
    assert!(job.lease_expires_at > SystemTime::now());
    worker.ack(&job).await.unwrap();
    worker.ack(&job).await.unwrap();
    assert!(worker.reserve([queue.as_str()], 1, Duration::ZERO).await.unwrap().is_empty());
}

#[tokio::test]
async fn nack_directives_retry_later_dead_letter_or_release_the_attempt() {
    let (client, worker, queue) = setup().await;
    client.enqueue(EnqueueRequest::new(queue.as_str(), "t").unwrap().with_max_attempts(5)).await.unwrap();

    let job = one(&worker, &queue).await;
    let outcome = worker.nack(&job, NackDirective::Release, None).await.unwrap();
    assert_eq!(outcome.state, "READY");
    let job = one(&worker, &queue).await;
    assert_eq!(job.attempt, 1, "a release gives the attempt back");

    let outcome = worker.nack(&job, NackDirective::RetryAfter(Duration::from_millis(200)),
                              Some(("boom".into(), "trace".into()))).await.unwrap();
    assert_eq!(outcome.state, "SCHEDULED");
    assert!(outcome.run_at.is_some());
    let job = one(&worker, &queue).await;
    assert_eq!(job.attempt, 2);

    let outcome = worker.nack(&job, NackDirective::DeadLetter("bad input".into()), None).await.unwrap();
    assert_eq!(outcome.state, "DEAD_LETTERED");
}

#[tokio::test]
async fn extending_a_lease_moves_its_expiry_and_a_foreign_lease_is_refused() {
    let (client, worker, queue) = setup().await;
    client.enqueue(EnqueueRequest::new(queue.as_str(), "t").unwrap()).await.unwrap();
    let mut job = one(&worker, &queue).await;
    let before = job.lease_expires_at;
    let extension = worker.extend_lease(&mut job, Duration::from_secs(120)).await.unwrap();
    assert!(extension.lease_expires_at > before && !extension.cancel_requested);
    assert_eq!(job.lease_expires_at, extension.lease_expires_at);

    let mut stranger = job.clone();
    stranger.lease_id = "00000000-0000-7000-8000-000000000000".into();
    match worker.ack(&stranger).await.unwrap_err() {
        Error::Refused { reason, .. } => assert_eq!(reason, "LEASE_MISMATCH"),
        other => panic!("{other:?}"),
    }
    worker.ack(&job).await.unwrap();
}

#[tokio::test]
async fn a_long_poll_on_an_empty_queue_ends_empty_after_its_wait() {
    let (_client, worker, queue) = setup().await;
    let started = Instant::now();
    let jobs = worker.reserve([queue.as_str()], 4, Duration::from_millis(500)).await.unwrap();
    assert!(jobs.is_empty());
    assert!(started.elapsed() >= Duration::from_millis(450), "{:?}", started.elapsed());
}
