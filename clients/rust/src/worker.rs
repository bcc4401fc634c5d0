//! The worker side: reserve jobs under a lease, then ack them, nack them with a retry or
//! dead-letter directive, or extend the lease while working — enough for a worker loop
//! (`examples/worker.rs`).

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::builder::ClientBuilder;
use crate::client::Client;
use crate::error::{Error, Failure};
use crate::proto::sepp_v1 as pb;
use crate::request::{CustomValue, Payload};

const WORKER: &str = "/sepp.api.v1.WorkerService/";

/// A job reserved by this worker, with its lease.
#[derive(Clone, Debug, PartialEq)]
pub struct ReservedJob {
    /// The job's id (canonical UUID text).
    pub id: String,
    /// Its queue.
    pub queue: String,
    /// The type tag to dispatch on.
    pub job_type: String,
    /// Its body (empty data and encoding when it has none).
    pub payload: Payload,
    /// Its custom map.
    pub custom: BTreeMap<String, CustomValue>,
    /// Its priority, 0–9.
    pub priority: i32,
    /// Deliveries allowed before dead-letter.
    pub max_attempts: i32,
    /// This delivery's number: 1 on the first.
    pub attempt: i32,
    /// Its idempotency key ("" when none).
    pub idempotency_key: String,
    /// Its W3C trace context.
    pub trace_context: BTreeMap<String, String>,
    /// The lease's fencing token: every ack, nack and extend carries it.
    pub lease_id: String,
    /// When the lease runs out (the server's clock); an ack after it is refused.
    pub lease_expires_at: SystemTime,
}

impl ReservedJob {
    fn from_proto(r: pb::Reservation) -> ReservedJob {
        let job = r.job.unwrap_or_default();
        let payload = job.payload.map(|p| Payload::new(p.data, p.encoding)).unwrap_or_default();
        ReservedJob {
            id: job.id,
            queue: job.queue,
            job_type: job.job_type,
            payload,
            custom: job.custom.iter().filter_map(|(k, v)| CustomValue::from_proto(v).map(|v| (k.clone(), v))).collect(),
            priority: job.priority,
            max_attempts: job.max_attempts,
            attempt: r.attempt,
            idempotency_key: job.idempotency_key,
            trace_context: job.trace_context,
            lease_id: r.lease_id,
            lease_expires_at: time(r.lease_expires_at.as_ref()),
        }
    }
}

/// What a nack asks the server to do with the job.
#[derive(Clone, Debug, PartialEq)]
pub enum NackDirective {
    /// Retry with the queue's exponential backoff and jitter; dead-letters once the job
    /// used its `max_attempts` (`ATTEMPTS_EXHAUSTED`).
    Retry,
    /// Retry after exactly this delay; dead-letters at `max_attempts` too.
    RetryAfter(Duration),
    /// Dead-letter now with this reason (`NACK_DEAD_LETTER`).
    DeadLetter(String),
    /// Give the job back at once without spending the attempt (a worker shutting down).
    Release,
}

/// What a nack did: the job's new state and, for a retry, when it runs next.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NackOutcome {
    /// `SCHEDULED`, `READY` or `DEAD_LETTERED`.
    pub state: String,
    /// When the job runs next (a retry), if the server said.
    pub run_at: Option<SystemTime>,
}

/// A new lease expiry, and whether an admin asked to cancel the job.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LeaseExtension {
    /// The lease's new expiry.
    pub lease_expires_at: SystemTime,
    /// An admin asked to cancel the job: stop and settle it soon.
    pub cancel_requested: bool,
}

/// A worker's connection: reserve, ack, nack, extend. Cheap to clone.
///
/// A settle or extend whose lease is gone fails with `Error::Refused` and reason
/// `LEASE_EXPIRED` (it ran out, or the job was settled otherwise) or `LEASE_MISMATCH`
/// (another delivery holds the job). An ack is safe to repeat with the same lease.
#[derive(Clone, Debug)]
pub struct Worker {
    client: Client,
    worker_id: String,
}

impl Worker {
    /// A worker of the server at `target` with default settings; nothing is dialled until
    /// the first call. Errors: an address that is not `HOST:PORT`.
    pub fn connect(target: impl Into<String>) -> Result<Worker, Error> {
        Worker::from_builder(Client::builder(target))
    }

    /// A worker with a client's settings (token, timeout, retries).
    pub fn from_builder(builder: ClientBuilder) -> Result<Worker, Error> {
        Ok(Worker::from_client(builder.build()?))
    }

    /// A worker sharing `client`'s connection.
    pub fn from_client(client: Client) -> Worker {
        let host = std::env::var("HOSTNAME").unwrap_or_else(|_| "rust".to_string());
        Worker { client, worker_id: format!("{host}:{}", std::process::id()) }
    }

    /// The same worker under another id (shown on the Workers page and in attempt history).
    pub fn with_worker_id(mut self, worker_id: impl Into<String>) -> Worker {
        self.worker_id = worker_id.into();
        self
    }

    /// Its worker id.
    pub fn worker_id(&self) -> &str {
        &self.worker_id
    }

    /// Reserve up to `max_jobs` jobs from `queues` (tried in order), waiting up to `wait`
    /// (≤ 30 s) when none is ready; an empty list when the wait ends with nothing.
    pub async fn reserve<Q: Into<String>>(&self, queues: impl IntoIterator<Item = Q>, max_jobs: u32,
                                          wait: Duration) -> Result<Vec<ReservedJob>, Error> {
        let request = pb::ReserveRequest {
            queues: queues.into_iter().map(Into::into).collect(),
            max_jobs: max_jobs.min(i32::MAX as u32) as i32,
            lease_duration: None,
            wait: Some(duration(wait)),
            worker_id: self.worker_id.clone(),
            concurrency: max_jobs.min(i32::MAX as u32) as i32,
            client_version: concat!("sepp-rs/", env!("CARGO_PKG_VERSION")).to_string(),
            host: std::env::var("HOSTNAME").unwrap_or_default(),
            ..Default::default()
        };
        let response: pb::ReserveResponse = self.call("Reserve", &request, false, wait).await?;
        Ok(response.reservations.into_iter().map(ReservedJob::from_proto).collect())
    }

    /// Complete `job`. Safe to repeat with the same lease (a lost ack may be sent again).
    pub async fn ack(&self, job: &ReservedJob) -> Result<(), Error> {
        let request = pb::AckRequest {
            job_id: job.id.clone(),
            lease_id: job.lease_id.clone(),
            worker_id: self.worker_id.clone(),
            ..Default::default()
        };
        let _: pb::AckResponse = self.call("Ack", &request, true, Duration::ZERO).await?;
        Ok(())
    }

    /// Give `job` back with `directive`, recording `error` (message, detail ≤ 16 KiB) in its
    /// attempt history.
    pub async fn nack(&self, job: &ReservedJob, directive: NackDirective, error: Option<(String, String)>)
                      -> Result<NackOutcome, Error> {
        use pb::nack_request::Directive;
        let directive = match directive {
            NackDirective::Retry => Directive::Retry(pb::RetryDirective::default()),
            NackDirective::RetryAfter(d) => Directive::RetryAfter(duration(d)),
            NackDirective::DeadLetter(reason) => Directive::DeadLetter(reason),
            NackDirective::Release => Directive::Release(pb::ReleaseDirective::default()),
        };
        let request = pb::NackRequest {
            job_id: job.id.clone(),
            lease_id: job.lease_id.clone(),
            directive: Some(directive),
            error: error.map(|(message, detail)| pb::JobError { message, detail }),
            worker_id: self.worker_id.clone(),
            ..Default::default()
        };
        let response: pb::NackResponse = self.call("Nack", &request, false, Duration::ZERO).await?;
        let state = pb::JobState::from_i32(response.state).map_or("JOB_STATE_UNSPECIFIED", |s| s.as_str_name());
        Ok(NackOutcome { state: state.to_string(), run_at: response.run_at.as_ref().map(|t| time(Some(t))) })
    }

    /// Extend `job`'s lease to now + `by` (the server's clock); updates
    /// `job.lease_expires_at` and says whether an admin asked to cancel it.
    pub async fn extend_lease(&self, job: &mut ReservedJob, by: Duration) -> Result<LeaseExtension, Error> {
        let request = pb::ExtendLeaseRequest {
            job_id: job.id.clone(),
            lease_id: job.lease_id.clone(),
            extend_by: Some(duration(by)),
            worker_id: self.worker_id.clone(),
            ..Default::default()
        };
        let response: pb::ExtendLeaseResponse = self.call("ExtendLease", &request, true, Duration::ZERO).await?;
        job.lease_expires_at = time(response.lease_expires_at.as_ref());
        Ok(LeaseExtension { lease_expires_at: job.lease_expires_at, cancel_requested: response.cancel_requested })
    }

    async fn call<Req: prost::Message, Resp: prost::Message + Default>(&self, method: &str, request: &Req, idempotent: bool,
                                                                         extra: Duration) -> Result<Resp, Error> {
        self.client.call_path(&format!("{WORKER}{method}"), request, idempotent, extra).await.map_err(Failure::into_error)
    }
}

fn duration(d: Duration) -> prost_types::Duration {
    prost_types::Duration { seconds: d.as_secs() as i64, nanos: d.subsec_nanos() as i32 }
}

fn time(t: Option<&prost_types::Timestamp>) -> SystemTime {
    match t {
        Some(t) if t.seconds >= 0 => UNIX_EPOCH + Duration::new(t.seconds as u64, t.nanos.max(0) as u32),
        _ => UNIX_EPOCH,
    }
}
