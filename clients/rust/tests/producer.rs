//! The producer client against a live `sepp serve`: server info, local and server
//! verdicts agreeing (code, message, details), batches with per-job results, whole-batch
//! refusals, atomic batches, idempotency inside a batch, and the transport errors a
//! caller must tell apart (nothing listening, a message over the cap).

mod common;

use std::time::{Duration, Instant};

use sepp_rs::{AtomicEnqueueError, Client, CustomValue, EnqueueRequest, Error, Payload, PersistMode, Priority,
              RejectionCode, TransportErrorKind};

const MIB: usize = 1024 * 1024;

async fn local() -> Client {
    Client::connect(common::target()).await.unwrap()
}

async fn remote() -> Client {
    Client::builder(common::target()).validate_locally(false).connect().await.unwrap()
}

fn req(queue: &str, job_type: &str) -> EnqueueRequest {
    EnqueueRequest::new(queue, job_type).unwrap()
}

fn shape(results: &[Result<sepp_rs::EnqueueAck, sepp_rs::Rejection>]) -> Vec<(String, String)> {
    results.iter().map(|r| match r {
        Ok(_) => ("ack".to_string(), String::new()),
        Err(rej) => (rej.code.name().to_string(), rej.field.clone()),
    }).collect()
}

#[tokio::test]
async fn server_info_advertises_version_modes_and_limits() {
    let info = local().await.get_server_info().await.unwrap();
    assert!(!info.version.is_empty());
    assert_eq!((info.persist_mode, info.strict), (PersistMode::Group, false));
    assert_eq!(info.limits.max_enqueue_batch, 256);
    assert_eq!(info.limits.max_schedule_horizon, Duration::from_secs(365 * 86_400));
    assert_eq!(info.queue_defaults.limits.max_payload_bytes, MIB as i64);
    assert!(info.has_feature("enqueue_atomic"), "{:?}", info.features);
}

#[tokio::test]
async fn a_rejection_is_the_same_whether_found_locally_or_by_the_server() {
    let expected = "PayloadTooLarge: payload is larger than the queue's max_payload_bytes; to raise it: sepp queues \
                    declare emails --max-payload-bytes N (field payload.data, limit 1048576, actual 1048577)";
    for client in [local().await, remote().await] {
        let err = client.enqueue(req("emails", "big").with_payload(Payload::new(vec![b'x'; MIB + 1], ""))).await.unwrap_err();
        let rejection = err.rejection().unwrap_or_else(|| panic!("{err:?}"));
        assert_eq!(rejection.code, RejectionCode::PayloadTooLarge);
        assert_eq!(rejection.to_string(), expected);
    }
    // Exactly the limit is accepted.
    local().await.enqueue(req("emails", "big").with_payload(Payload::new(vec![b'x'; MIB], ""))).await.unwrap();
}

#[tokio::test]
async fn every_optional_field_is_accepted() {
    let request = req("emails", "welcome")
        .with_payload(Payload::new(br#"{"user_id": 42}"#.to_vec(), "application/json"))
        .with_priority(Priority::P7)
        .with_max_attempts(5)
        .with_custom_entry("user_id", 42)
        .with_custom_entry("locale", "en-US")
        .with_custom_entry("vip", true)
        .with_custom_entry("score", 0.5)
        .with_custom_entry("big", CustomValue::Int(i64::MIN))
        .with_scheduled_at(std::time::SystemTime::now() + Duration::from_secs(3600))
        .with_idempotency_key(common::fresh_queue("key"))
        .with_trace_context([("traceparent", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")]);
    let ack = local().await.enqueue(request).await.unwrap();
    assert!(!ack.deduplicated);
    assert_eq!(ack.job_id.get_version_num(), 7);
    assert_eq!(ack.to_string(), ack.job_id.hyphenated().to_string());
}

fn mixed() -> Vec<EnqueueRequest> {
    vec![
        req("emails", "welcome"),
        req("emails", "welcome").with_max_attempts(0),
        req("q".repeat(129).as_str(), "nameless"),
        req("emails", "receipt").with_custom_entry("n", f64::NAN),
        req("billing", "charge"),
    ]
}

#[tokio::test]
async fn a_batch_returns_one_result_per_job_in_order_locally_and_from_the_server() {
    let expected: Vec<(String, String)> = [("ack", ""), ("InvalidArgument", "max_attempts"), ("QueueNameInvalid", "queue"),
                                           ("InvalidArgument", "custom[n]"), ("ack", "")]
        .iter().map(|(a, b)| (a.to_string(), b.to_string())).collect();
    assert_eq!(shape(&local().await.enqueue_batch(mixed()).await.unwrap()), expected);
    assert_eq!(shape(&remote().await.enqueue_batch(mixed()).await.unwrap()), expected);
}

#[tokio::test]
async fn a_batch_of_only_bad_jobs_sends_nothing_and_still_answers() {
    let results = local().await.enqueue_batch([req("q", "t").with_max_attempts(-1), req("Q", "t").with_max_attempts(0)]).await.unwrap();
    assert_eq!(shape(&results).iter().map(|s| s.0.as_str()).collect::<Vec<_>>(), ["InvalidArgument", "InvalidArgument"]);
}

#[tokio::test]
async fn an_empty_or_over_cap_batch_is_refused_whole_by_either_side() {
    for count in [0usize, 257] {
        for client in [local().await, remote().await] {
            let jobs = || vec![req("q", "t"); count];
            let err = client.enqueue_batch(jobs()).await.unwrap_err();
            let r = err.rejection().unwrap_or_else(|| panic!("{err:?}"));
            assert_eq!((r.code, r.field.as_str(), r.limit, r.actual), (RejectionCode::InvalidArgument, "jobs", Some(256), Some(count as i64)));
            let r = match client.enqueue_atomic(jobs()).await.unwrap_err() { AtomicEnqueueError::Rejected(r) => r, other => panic!("{other:?}") };
            assert_eq!((r.field.as_str(), r.actual), ("jobs", Some(count as i64)));
        }
    }
}

#[tokio::test]
async fn a_key_repeated_inside_one_batch_is_created_once() {
    let key = common::fresh_queue("k");
    let results = local().await.enqueue_batch(vec![req("q", "t").with_idempotency_key(key.as_str()); 2]).await.unwrap();
    let (first, second) = (results[0].clone().unwrap(), results[1].clone().unwrap());
    assert_eq!((second.job_id, first.deduplicated, second.deduplicated), (first.job_id, false, true));
}

#[tokio::test]
async fn an_atomic_batch_counts_a_deduplicated_job_as_a_success() {
    let client = local().await;
    let keys: Vec<String> = (0..3).map(|_| common::fresh_queue("k")).collect();
    let acks = client.enqueue_atomic(["reserve_seat", "charge_card", "email"].iter().zip(&keys)
        .map(|(step, k)| req("checkout", step).with_idempotency_key(k.as_str()))).await.unwrap();
    assert_eq!(acks.len(), 3);
    let again = client.enqueue_atomic([req("checkout", "reserve_seat").with_idempotency_key(keys[0].as_str()),
                                       req("checkout", "new_step")]).await.unwrap();
    assert_eq!((again[0].job_id, again[0].deduplicated, again[1].deduplicated), (acks[0].job_id, true, false));
}

#[tokio::test]
async fn a_failed_atomic_batch_stores_nothing_and_lists_every_failure_the_same_from_either_side() {
    for client in [local().await, remote().await] {
        let keys = [common::fresh_queue("k"), common::fresh_queue("k")];
        let good = || [req("checkout", "reserve_seat").with_idempotency_key(keys[0].as_str()),
                       req("checkout", "charge_card").with_idempotency_key(keys[1].as_str())];
        let [a, b] = good();
        let err = client.enqueue_atomic([a, req("checkout", "x").with_max_attempts(0), b,
                                         req("bad.queue", "x").with_payload(Payload::new(vec![0; MIB + 1], ""))]).await.unwrap_err();
        let errors = match &err { AtomicEnqueueError::Validation(errors) => errors, other => panic!("{other:?}") };
        let listed: Vec<(usize, RejectionCode, &str)> = errors.iter().map(|e| (e.index, e.rejection.code, e.rejection.field.as_str())).collect();
        assert_eq!(listed, [(1, RejectionCode::InvalidArgument, "max_attempts"), (3, RejectionCode::PayloadTooLarge, "payload.data")]);
        assert!(err.to_string().starts_with("atomic batch rejected, nothing enqueued: job 1: InvalidArgument: "), "{err}");
        // Nothing was stored and no key was claimed: the good jobs are new now.
        assert!(client.enqueue_atomic(good()).await.unwrap().iter().all(|a| !a.deduplicated));
    }
}

#[tokio::test]
async fn a_strict_server_refuses_an_undeclared_queue_locally_and_itself() {
    for validate in [true, false] {
        let client = Client::builder(common::strict_target()).validate_locally(validate).connect().await.unwrap();
        let err = client.enqueue(req("undeclared", "t")).await.unwrap_err();
        assert_eq!(err.to_string(), "UnknownQueue: queue 'undeclared' is not declared (strict mode) (field queue)");
    }
}

#[tokio::test]
async fn a_local_rejection_needs_no_round_trip_and_new_refuses_bad_names_at_once() {
    let client = local().await;
    let err = client.enqueue(req("emails", "t").with_max_attempts(1001)).await.unwrap_err();
    let r = err.rejection().unwrap();
    assert_eq!((r.limit, r.actual), (Some(1000), Some(1001)));
    assert!(r.message.ends_with("(SEPP_LIMITS__MAX_ATTEMPTS_CEILING)"), "{}", r.message);
    let r = EnqueueRequest::new(".hidden", "t").unwrap_err();
    assert_eq!(r.to_string(), "QueueNameInvalid: queue name must match [A-Za-z0-9][A-Za-z0-9._:-]* (field queue)");
}

#[tokio::test]
async fn nothing_listening_fails_at_once_and_says_it_was_never_sent() {
    let started = Instant::now();
    let err = Client::connect(format!("http://127.0.0.1:{}", common::unused_port())).await.unwrap_err();
    assert!(started.elapsed() < Duration::from_secs(2), "{:?}", started.elapsed());
    let t = match &err { Error::Transport(t) => t, other => panic!("{other:?}") };
    assert_eq!(t.kind(), TransportErrorKind::Unavailable);
    assert!(t.not_sent() && !t.may_be_stored() && t.transient());
    assert!(t.message().starts_with("connection refused: is sepp running on 127.0.0.1:"), "{t}");
}

#[tokio::test]
async fn a_request_over_the_message_cap_is_not_sent() {
    let client = Client::builder(common::target()).max_message_bytes(64 * 1024).validate_locally(false)
        .connect().await.unwrap();
    let err = client.enqueue(req("emails", "big").with_payload(Payload::new(vec![0; 100_000], ""))).await.unwrap_err();
    let t = err.transport().unwrap();
    assert_eq!(t.kind(), TransportErrorKind::MessageTooLarge);
    assert!(!t.transient() && !t.may_be_stored());
}

#[tokio::test]
async fn the_error_types_are_std_errors() {
    fn takes(_: Box<dyn std::error::Error + Send + Sync>) {}
    takes(Box::new(EnqueueRequest::new("", "t").unwrap_err()));
    takes(Box::new(AtomicEnqueueError::Validation(vec![])));
    let e: Box<dyn std::error::Error> = Error::Rejected(EnqueueRequest::new("q", "").unwrap_err()).into();
    assert_eq!(e.to_string(), "JobTypeInvalid: job type is empty (field job_type)");
}

#[tokio::test]
async fn a_plain_batch_sent_by_column_answers_each_job_in_request_order() {
    // Plain jobs (queue, type, payload only) travel as column runs; each ack must still be
    // the job at its index: reserve them back and match ids to job types and payloads.
    let client = local().await;
    let (a, b) = (common::fresh_queue("rs-plain"), common::fresh_queue("rs-plain"));
    let jobs: Vec<EnqueueRequest> = (0..12).map(|i| {
        let queue = if i % 3 == 0 { &b } else { &a };
        let r = req(queue, &format!("t{}", i % 2));
        if i % 4 == 0 { r } else { r.with_payload(Payload::new(format!("{i}").into_bytes(), if i % 5 == 0 { "x" } else { "" })) }
    }).collect();
    let acks: Vec<String> = client.enqueue_batch(jobs.clone()).await.unwrap().into_iter()
        .map(|r| r.unwrap().job_id.to_string()).collect();
    let worker = sepp_rs::Worker::from_client(client);
    let mut seen = std::collections::HashMap::new();
    for queue in [&a, &b] {
        for job in worker.reserve([queue.as_str()], 12, Duration::ZERO).await.unwrap() {
            seen.insert(job.id.clone(), (job.queue.clone(), job.job_type.clone(), job.payload.clone()));
        }
    }
    for (i, (id, request)) in acks.iter().zip(&jobs).enumerate() {
        let want = (request.queue().to_string(), request.job_type().to_string(), request.payload().cloned().unwrap_or_default());
        assert_eq!(seen.get(id), Some(&want), "job {i}");
    }
}
