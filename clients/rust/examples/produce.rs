//! Enqueue a few jobs the ways the Producers page shows: one job with every knob, a batch
//! with per-job results, and an atomic batch.
//!
//! ```sh
//! make serve                                   # in the repository root, another terminal
//! cd clients/rust && cargo run --offline --example produce
//! ```
//! `SEPP_SERVER` overrides the address (default `http://127.0.0.1:7700`), `SEPP_TOKEN` sets
//! the token when the server has tokens on.

use std::time::{Duration, SystemTime};

use sepp_rs::{AtomicEnqueueError, Client, EnqueueRequest, Payload, Priority};

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let target = std::env::var("SEPP_SERVER").unwrap_or_else(|_| "http://127.0.0.1:7700".to_string());
    let client = Client::connect(target).await?;
    let info = client.get_server_info().await?;
    println!("sepp {} ({} mode, strict: {})", info.version, info.persist_mode.as_str(), info.strict);

    let ack = client
        .enqueue(
            EnqueueRequest::new("emails", "welcome")?
                .with_payload(Payload::new(br#"{"user_id": 42}"#.to_vec(), "application/json"))
                .with_priority(Priority::P7)
                .with_custom_entry("locale", "en-US")
                .with_idempotency_key("welcome-user-42"),
        )
        .await?;
    println!("{} {}", ack.job_id, if ack.deduplicated { "deduplicated" } else { "enqueued" });

    let later = EnqueueRequest::new("emails", "reminder")?.with_scheduled_at(SystemTime::now() + Duration::from_secs(3600));
    let big = EnqueueRequest::new("emails", "big")?.with_payload(Payload::new(vec![b'x'; 2_000_000], ""));
    for (i, result) in client.enqueue_batch([later, big]).await?.into_iter().enumerate() {
        match result {
            Ok(ack) => println!("job {i} enqueued: {}", ack.job_id),
            Err(rejection) => println!("job {i} rejected: {rejection}"),
        }
    }

    match client
        .enqueue_atomic([EnqueueRequest::new("checkout", "reserve_seat")?, EnqueueRequest::new("checkout", "charge_card")?])
        .await
    {
        Ok(acks) => println!("all {} jobs enqueued", acks.len()),
        Err(AtomicEnqueueError::Validation(errors)) => errors.iter().for_each(|e| println!("rejected: {e}")),
        Err(e) => return Err(e.into()),
    }
    Ok(())
}
