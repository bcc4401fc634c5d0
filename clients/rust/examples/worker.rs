//! A worker loop: reserve jobs from `emails`, handle them, ack — or nack with a retry, or
//! dead-letter a job type it has no handler for; keep the lease alive for a slow job.
//!
//! ```sh
//! cd clients/rust && cargo run --offline --example worker            # Ctrl-C stops it
//! SEPP_WORKER_IDLE_EXIT=2 cargo run --offline --example worker       # stop after 2 empty polls
//! ```
//! `SEPP_SERVER` overrides the address (default `http://127.0.0.1:7700`), `SEPP_TOKEN` sets
//! a token with role `work`.

use std::time::Duration;

use sepp_rs::{Client, NackDirective, ReservedJob, Worker};

/// What handling a job can end in.
enum Outcome {
    Done,
    Retry(String),
    NoHandler,
}

async fn handle(worker: &Worker, job: &mut ReservedJob) -> Outcome {
    match job.job_type.as_str() {
        "welcome" | "receipt" | "reminder" => {
            println!("{} {} {}", job.job_type, job.id, String::from_utf8_lossy(&job.payload.data));
            Outcome::Done
        }
        "slow" => {
            // Long work: extend the lease before it runs out, and stop if an admin cancels.
            for _ in 0..3 {
                tokio::time::sleep(Duration::from_millis(200)).await;
                match worker.extend_lease(job, Duration::from_secs(30)).await {
                    Ok(ext) if ext.cancel_requested => return Outcome::Retry("cancelled by an admin".into()),
                    Ok(_) => {}
                    Err(e) => return Outcome::Retry(e.to_string()),
                }
            }
            Outcome::Done
        }
        "flaky" if job.attempt < 2 => Outcome::Retry("first attempts fail".into()),
        "flaky" => Outcome::Done,
        _ => Outcome::NoHandler,
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let target = std::env::var("SEPP_SERVER").unwrap_or_else(|_| "http://127.0.0.1:7700".to_string());
    let idle_exit: Option<u32> = std::env::var("SEPP_WORKER_IDLE_EXIT").ok().and_then(|v| v.parse().ok());
    let worker = Worker::from_client(Client::builder(target).build()?);
    let mut idle = 0;
    loop {
        let jobs = worker.reserve(["emails"], 16, Duration::from_secs(5)).await?;
        if jobs.is_empty() {
            idle += 1;
            if idle_exit.map_or(false, |n| idle >= n) {
                return Ok(());
            }
            continue;
        }
        idle = 0;
        for mut job in jobs {
            let settled = match handle(&worker, &mut job).await {
                Outcome::Done => worker.ack(&job).await.map(|_| ()),
                Outcome::Retry(why) => worker.nack(&job, NackDirective::Retry, Some((why, String::new()))).await.map(|_| ()),
                Outcome::NoHandler => {
                    let reason = format!("no handler for job type {:?}", job.job_type);
                    worker.nack(&job, NackDirective::DeadLetter(reason), None).await.map(|_| ())
                }
            };
            if let Err(e) = settled {
                eprintln!("could not settle {}: {e}", job.id); // a lease that ran out: the job comes back
            }
        }
    }
}
