//! The Rust client's side of `benchmarks/rust_client.py`: one producer, one call at a time,
//! for `WARMUP` + `DURATION` seconds, counting the calls of the last `DURATION`.
//!
//! ```sh
//! cargo run --offline --release --example bench -- http://127.0.0.1:7700 lone 5 1    # Enqueue of a ~200-byte job
//! cargo run --offline --release --example bench -- http://127.0.0.1:7700 batch 5 1   # EnqueueBatch of 256 no-op jobs
//! cargo run --offline --release --example bench -- http://127.0.0.1:7700 floor 5 1   # the same batch, pre-serialized
//! ```
//! Prints `<jobs per second> <calls>` (mode `wire`: the floor's bytes in hex, nothing sent).
//! `floor` is the batch floor on this crate's transport:
//! the `EnqueueBatchRequest` the client sends for the 256 no-op jobs (one `PlainJobs` run),
//! encoded once and sent as bytes over the bare channel, the answer left undecoded.

use std::time::{Duration, Instant};

use bytes::Bytes;
use prost::Message;
use sepp_rs::grpc::{Channel, ChannelOptions};
use sepp_rs::proto::sepp_v1 as pb;
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
    let per_call = if mode == "lone" { 1 } else { 256 };
    let channel = Channel::new(client.target(), ChannelOptions::default());
    let wire = Bytes::from(pb::EnqueueBatchRequest {
        plain: vec![pb::PlainJobs { queue: "bench".into(), job_type: "noop".into(), data: vec![Vec::new(); 256],
                                    encoding: String::new() }],
        ..Default::default()
    }.encode_to_vec());
    if mode == "wire" {
        println!("{}", wire.iter().map(|b| format!("{b:02x}")).collect::<String>());
        return Ok(());
    }
    let start = Instant::now();
    let (t0, end) = (start + warmup, start + warmup + duration);
    let mut calls = 0u64;
    loop {
        let s = Instant::now();
        if s >= end {
            break;
        }
        if mode == "floor" {
            channel.unary_bytes("/sepp.api.v1.ProducerService/EnqueueBatch", wire.clone(), Some(Duration::from_secs(10)))
                .await?;
        } else if mode == "batch" {
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
