//! The Rust client's side of `benchmarks/rust_client.py`: one producer, one call at a time,
//! for `WARMUP` + `DURATION` seconds, counting the calls of the last `DURATION`.
//!
//! ```sh
//! cargo run --offline --release --example bench -- http://127.0.0.1:7700 lone 5 1    # Enqueue of a ~200-byte job
//! cargo run --offline --release --example bench -- http://127.0.0.1:7700 batch 5 1   # EnqueueBatch of 256 no-op jobs
//! ```
//! Prints `<jobs per second> <calls>`.

use std::time::{Duration, Instant};

use sepp_rs::{Client, EnqueueRequest, Payload};

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let (target, mode) = (args[1].clone(), args[2].clone());
    let duration = Duration::from_secs_f64(args.get(3).map_or(Ok(5.0), |s| s.parse())?);
    let warmup = Duration::from_secs_f64(args.get(4).map_or(Ok(1.0), |s| s.parse())?);
    let client = Client::connect(target).await?;
    let mut data = br#"{"user_id": 42, "template": "welcome", "locale": "en-US"}"#.to_vec();
    data.resize(data.len() + 140, b' ');
    let lone = EnqueueRequest::new("bench", "welcome")?.with_payload(Payload::new(data, "application/json"));
    let noop = EnqueueRequest::new("bench", "noop")?;
    let per_call = if mode == "batch" { 256 } else { 1 };
    let start = Instant::now();
    let (t0, end) = (start + warmup, start + warmup + duration);
    let mut calls = 0u64;
    loop {
        let s = Instant::now();
        if s >= end {
            break;
        }
        if mode == "batch" {
            let results = client.enqueue_batch(std::iter::repeat(noop.clone()).take(256)).await?;
            assert!(results.iter().all(Result::is_ok));
        } else {
            client.enqueue(lone.clone()).await?;
        }
        let e = Instant::now();
        if s >= t0 && e <= end {
            calls += 1;
        }
    }
    println!("{} {calls}", (calls * per_call) as f64 / duration.as_secs_f64());
    Ok(())
}
