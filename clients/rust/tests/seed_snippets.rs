//! Every Rust snippet of the producer page (the seed, ../shared/seeds/producers.md),
//! copied verbatim inside an `async fn` that receives the connected client, run against a
//! live `sepp serve`, its printed output checked.
//!
//! `println!` / `eprintln!` are shadowed below so the snippets' own lines are captured
//! (per test thread; the tests run on tokio's current-thread runtime) and compared.
//! tests/rust/test_rust_client.py checks that each snippet of the page appears here.

mod common;

use std::cell::RefCell;
use std::error::Error;

use sepp_rs::Client;

thread_local! {
    static OUT: RefCell<Vec<String>> = RefCell::new(Vec::new());
}

macro_rules! println {
    ($($arg:tt)*) => { OUT.with(|o| o.borrow_mut().push(format!($($arg)*))) };
}

macro_rules! eprintln {
    ($($arg:tt)*) => { OUT.with(|o| o.borrow_mut().push(format!("stderr: {}", format!($($arg)*)))) };
}

/// The lines the snippet printed since the last call.
fn printed() -> Vec<String> {
    OUT.with(|o| std::mem::take(&mut *o.borrow_mut()))
}

type Result = std::result::Result<(), Box<dyn Error>>;

async fn connect() -> Client {
    Client::connect(common::target()).await.unwrap()
}

async fn connect_strict() -> Client {
    Client::connect(common::strict_target()).await.unwrap()
}

fn is_uuid(text: &str) -> bool {
    uuid::Uuid::parse_str(text).map_or(false, |u| u.hyphenated().to_string() == text)
}

// ---------------------------------------------------------------------- Build an enqueue request

#[allow(unused_variables)]
async fn build_an_enqueue_request(client: &Client) -> Result {
    use sepp_rs::EnqueueRequest;

    let ack = client.enqueue(EnqueueRequest::new("emails", "welcome")?).await?;
    println!("enqueued {}", ack.job_id);
    Ok(())
}

#[tokio::test]
async fn the_smallest_request_is_enqueued_and_its_id_printed() {
    build_an_enqueue_request(&connect().await).await.unwrap();
    let out = printed();
    assert_eq!(out.len(), 1);
    let id = out[0].strip_prefix("enqueued ").unwrap();
    assert!(is_uuid(id), "{id}");
}

// ---------------------------------------------------------------------- Set the payload and encoding

#[allow(unused_variables)]
async fn set_the_payload(client: &Client) -> Result {
    use sepp_rs::{EnqueueRequest, Payload};

    let payload = Payload::new(br#"{"user_id": 42}"#.to_vec(), "application/json");
    let ack = client
        .enqueue(EnqueueRequest::new("emails", "welcome")?.with_payload(payload))
        .await?;
    println!("{}", ack.job_id);
    Ok(())
}

#[tokio::test]
async fn a_payload_with_its_encoding_is_enqueued() {
    set_the_payload(&connect().await).await.unwrap();
    assert!(is_uuid(&printed()[0]));
}

// ---------------------------------------------------------------------- Priority and max_attempts

#[allow(unused_variables)]
async fn priority_and_max_attempts(client: &Client) -> Result {
    use sepp_rs::{EnqueueRequest, Priority};

    let request = EnqueueRequest::new("emails", "welcome")?
        .with_priority(Priority::P7)
        .with_max_attempts(5);
    let ack = client.enqueue(request).await?;
    println!("{}", ack.job_id);
    Ok(())
}

#[tokio::test]
async fn priority_and_max_attempts_overrides_are_enqueued() {
    priority_and_max_attempts(&connect().await).await.unwrap();
    assert!(is_uuid(&printed()[0]));
}

// ---------------------------------------------------------------------- Custom metadata map

#[allow(unused_variables)]
async fn custom_metadata_map(client: &Client) -> Result {
    use sepp_rs::EnqueueRequest;

    let request = EnqueueRequest::new("emails", "welcome")?
        .with_custom_entry("user_id", 42)
        .with_custom_entry("locale", "en-US")
        .with_custom_entry("vip", true);
    let ack = client.enqueue(request).await?;
    println!("{}", ack.job_id);
    Ok(())
}

#[tokio::test]
async fn a_custom_map_of_an_int_a_string_and_a_bool_is_enqueued() {
    custom_metadata_map(&connect().await).await.unwrap();
    assert!(is_uuid(&printed()[0]));
}

// ---------------------------------------------------------------------- Schedule a job

#[allow(unused_variables)]
async fn schedule_a_job(client: &Client) -> Result {
    use std::time::{Duration, SystemTime};
    use sepp_rs::EnqueueRequest;

    let run_at = SystemTime::now() + Duration::from_secs(3600); // one hour out
    let request = EnqueueRequest::new("emails", "reminder")?.with_scheduled_at(run_at);
    let ack = client.enqueue(request).await?;
    println!("{}", ack.job_id);
    Ok(())
}

#[tokio::test]
async fn a_job_scheduled_an_hour_out_is_enqueued() {
    schedule_a_job(&connect().await).await.unwrap();
    assert!(is_uuid(&printed()[0]));
}

// ---------------------------------------------------------------------- Read the enqueue response

async fn read_the_enqueue_response(client: &Client) -> Result {
    use sepp_rs::EnqueueRequest;

    let ack = client
        .enqueue(EnqueueRequest::new("emails", "welcome")?.with_idempotency_key("welcome-user-42"))
        .await?;

    if ack.deduplicated {
        println!("already enqueued as {}", ack.job_id);
    } else {
        println!("enqueued {}", ack.job_id);
    }
    Ok(())
}

#[tokio::test]
async fn the_second_keyed_enqueue_is_deduplicated_to_the_first_job() {
    let client = connect().await;
    read_the_enqueue_response(&client).await.unwrap();
    read_the_enqueue_response(&client).await.unwrap();
    let out = printed();
    // On a fresh server (the pytest run's: SEPP_RS_FRESH=1) the key is new to it at first;
    // run again against the same server, the first call is deduplicated too.
    let first = match out[0].strip_prefix("enqueued ") {
        Some(id) => id,
        None if std::env::var("SEPP_RS_FRESH").is_err() => out[0].strip_prefix("already enqueued as ").unwrap(),
        None => panic!("the key was taken before the first enqueue: {out:?}"),
    };
    assert!(is_uuid(first));
    assert_eq!(out[1], format!("already enqueued as {first}"));
}

// ---------------------------------------------------------------------- Batch & atomic enqueue

async fn batch_enqueue(client: &Client) -> Result {
    use sepp_rs::EnqueueRequest;

    let results = client
        .enqueue_batch([
            EnqueueRequest::new("emails", "welcome")?,
            EnqueueRequest::new("emails", "receipt")?,
        ])
        .await?;

    // One result per job, in order: some may be acks, others rejections.
    for (i, result) in results.into_iter().enumerate() {
        match result {
            Ok(ack) => println!("job {i} enqueued: {}", ack.job_id),
            Err(rejection) => eprintln!("job {i} rejected: {rejection}"),
        }
    }
    Ok(())
}

#[tokio::test]
async fn a_batch_gives_one_ack_per_job_in_order() {
    batch_enqueue(&connect().await).await.unwrap();
    let out = printed();
    assert_eq!(out.len(), 2, "{out:?}");
    for (i, line) in out.iter().enumerate() {
        let id = line.strip_prefix(&format!("job {i} enqueued: ")).unwrap_or_else(|| panic!("{line}"));
        assert!(is_uuid(id));
    }
}

#[tokio::test]
async fn on_a_strict_server_each_job_of_the_batch_gets_its_own_rejection() {
    batch_enqueue(&connect_strict().await).await.unwrap();
    assert_eq!(printed(), vec![
        "stderr: job 0 rejected: UnknownQueue: queue 'emails' is not declared (strict mode) (field queue)".to_string(),
        "stderr: job 1 rejected: UnknownQueue: queue 'emails' is not declared (strict mode) (field queue)".to_string(),
    ]);
}

async fn atomic_enqueue(client: &Client) -> Result {
    use sepp_rs::{AtomicEnqueueError, EnqueueRequest};

    match client
        .enqueue_atomic([
            EnqueueRequest::new("checkout", "reserve_seat")?,
            EnqueueRequest::new("checkout", "charge_card")?,
        ])
        .await
    {
        Ok(acks) => println!("all {} jobs enqueued", acks.len()),
        // One or more failed validation, so none were enqueued.
        Err(AtomicEnqueueError::Validation(errors)) => {
            for e in errors {
                eprintln!("job {} rejected: {}", e.index, e.rejection);
            }
        }
        // Transport or protocol failure; nothing was enqueued.
        Err(e) => return Err(e.into()),
    }
    Ok(())
}

#[tokio::test]
async fn an_atomic_batch_enqueues_every_job() {
    atomic_enqueue(&connect().await).await.unwrap();
    assert_eq!(printed(), vec!["all 2 jobs enqueued".to_string()]);
}

#[tokio::test]
async fn a_refused_atomic_batch_lists_every_failure_by_index_and_stores_nothing() {
    let client = connect_strict().await;
    atomic_enqueue(&client).await.unwrap();
    assert_eq!(printed(), vec![
        "stderr: job 0 rejected: UnknownQueue: queue 'checkout' is not declared (strict mode) (field queue)".to_string(),
        "stderr: job 1 rejected: UnknownQueue: queue 'checkout' is not declared (strict mode) (field queue)".to_string(),
    ]);
    // Nothing stored: the strict server still knows no queue at all.
    assert!(client.get_server_info().await.unwrap().queues.is_empty());
}

#[tokio::test]
async fn a_transport_failure_of_the_atomic_snippet_is_returned_as_its_error() {
    // A server that stops answering between connect and the call: the snippet's last arm.
    let client = Client::builder(format!("127.0.0.1:{}", common::unused_port()))
        .timeout(std::time::Duration::from_secs(2)).build().unwrap();
    let err = atomic_enqueue(&client).await.unwrap_err();
    assert!(err.to_string().contains("connection refused"), "{err}");
    assert!(printed().is_empty());
}
