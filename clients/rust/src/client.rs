//! The producer client: [`Client::connect`] and the three enqueue calls
//! plus `get_server_info`, with local validation against the server's advertised limits
//! and retries only where they are safe.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use prost::Message;
use tokio::sync::Mutex;
use tokio::time::Instant;

use crate::error::{classify, AtomicEnqueueError, Error, Failure, TransportError, TransportErrorKind};
use crate::builder::ClientBuilder;
use crate::grpc::{CallError, Channel};
use crate::info::ServerInfo;
use crate::proto::sepp_v1 as pb;
use crate::rejection::{IndexedRejection, Rejection, RejectionCode};
use crate::request::{EnqueueAck, EnqueueRequest};
use crate::retry::RetryPolicy;
use crate::validation::{batch_size_rejection, validate};

const PRODUCER: &str = "/sepp.api.v1.ProducerService/";
/// A local `UnknownQueue` fetches the server's info again when the copy is older than
/// this (a queue declared after the client started is then found).
const UNKNOWN_QUEUE_REFRESH_AFTER: Duration = Duration::from_secs(1);
/// How often a call that found no connection tries again, within its deadline.
const CONNECT_POLL: Duration = Duration::from_millis(50);
/// The feature flag of a server that reads plain batch jobs by column.
const PLAIN_FEATURE: &str = "enqueue_batch_plain";

/// A sepp producer client. Cheap to clone (clones share one HTTP/2 connection, which
/// multiplexes concurrent calls); use it from a tokio runtime.
///
/// ```no_run
/// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
/// use sepp_rs::{Client, EnqueueRequest};
/// let client = Client::connect("http://127.0.0.1:7700").await?;
/// let ack = client.enqueue(EnqueueRequest::new("emails", "welcome")?).await?;
/// println!("enqueued {}", ack.job_id);
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Client {
    inner: Arc<Inner>,
}

struct Inner {
    channel: Channel,
    target: String,
    timeout: Option<Duration>,
    validate_locally: bool,
    server_info_ttl: Option<Duration>,
    retry: RetryPolicy,
    wait_for_server_start: bool,
    info: Mutex<Option<(Arc<ServerInfo>, Instant)>>,
    /// Whether a call of this client got an answer from a server: later calls that find no
    /// connection wait for one (a restart) instead of failing at once.
    reached: AtomicBool,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client").field("target", &self.inner.target).finish()
    }
}

impl Client {
    /// Connect to the server at `target` (`http://HOST:PORT`, as its gRPC listener) with
    /// the default settings; see [`ClientBuilder::connect`].
    pub async fn connect(target: impl Into<String>) -> Result<Client, Error> {
        Client::builder(target).connect().await
    }

    /// A builder for a client of `target`: token, timeout, retries, local validation, TLS.
    pub fn builder(target: impl Into<String>) -> ClientBuilder {
        ClientBuilder::new(target.into())
    }

    /// The client `build` assembles from its settings and channel.
    pub(crate) fn assemble(b: &ClientBuilder, channel: Channel, target: String) -> Client {
        Client {
            inner: Arc::new(Inner {
                channel,
                target,
                timeout: b.timeout,
                validate_locally: b.validate_locally,
                server_info_ttl: b.server_info_ttl,
                retry: b.retry.clone(),
                wait_for_server_start: b.wait_for_server_start,
                info: Mutex::new(None),
                reached: AtomicBool::new(false),
            }),
        }
    }

    /// The `HOST:PORT` this client dials.
    pub fn target(&self) -> &str {
        &self.inner.target
    }

    /// Enqueue one job. Returns its ack once the job is durably stored (or matched by its
    /// idempotency key: `deduplicated`).
    ///
    /// Errors: `Error::Rejected` when the job breaks a catalogue rule (found locally
    /// without a round trip, or by the server); `Error::Transport` when no verdict came
    /// (retried first where safe: overloaded, never sent, or keyed).
    pub async fn enqueue(&self, request: EnqueueRequest) -> Result<EnqueueAck, Error> {
        let proto = request.to_proto();
        if self.inner.validate_locally {
            if let Some(rejection) = self.verdicts(std::slice::from_ref(&proto)).await?.pop().flatten() {
                return Err(Error::Rejected(rejection));
            }
        }
        let keyed = !proto.idempotency_key.is_empty();
        let ack: pb::EnqueueAck = self.call("Enqueue", &proto, keyed).await.map_err(Failure::into_error)?;
        ack_from(&ack).map_err(Error::Transport)
    }

    /// Enqueue jobs best-effort in one round trip: one result per job, in request order —
    /// an ack, or the job's rejection (the others are stored regardless).
    ///
    /// Errors: `Error::Rejected` (`InvalidArgument`, field `jobs`) for an empty batch or
    /// one over `max_enqueue_batch` (256 by default), nothing stored; `Error::Transport`
    /// when no verdict came.
    pub async fn enqueue_batch(&self, requests: impl IntoIterator<Item = EnqueueRequest>)
                               -> Result<Vec<Result<EnqueueAck, Rejection>>, Error> {
        let protos: Vec<pb::EnqueueRequest> = requests.into_iter().map(|r| r.to_proto()).collect();
        let verdicts = if self.inner.validate_locally {
            self.check_batch_size(protos.len()).await?;
            self.verdicts(&protos).await?
        } else {
            vec![None; protos.len()]
        };
        let to_send: Vec<pb::EnqueueRequest> = protos.iter().zip(&verdicts)
            .filter(|(_, v)| v.is_none()).map(|(p, _)| p.clone()).collect();
        let mut answers = Vec::new();
        if !to_send.is_empty() || !self.inner.validate_locally {
            let keyed = to_send.iter().all(|p| !p.idempotency_key.is_empty());
            let count = to_send.len();
            let message = match self.plain_wire().await {
                true => match plain_runs(&to_send) {
                    Some(plain) => pb::EnqueueBatchRequest { jobs: Vec::new(), plain, ..Default::default() },
                    None => pb::EnqueueBatchRequest { jobs: to_send, plain: Vec::new(), ..Default::default() },
                },
                false => pb::EnqueueBatchRequest { jobs: to_send, plain: Vec::new(), ..Default::default() },
            };
            let response: pb::EnqueueBatchResponse = self.call("EnqueueBatch", &message, keyed).await.map_err(Failure::into_error)?;
            if response.results.len() != count {
                return Err(protocol(format!("the server returned {} results for {count} jobs", response.results.len())));
            }
            answers = response.results;
        }
        let mut answers = answers.into_iter();
        let mut out = Vec::with_capacity(verdicts.len());
        for verdict in verdicts {
            if let Some(rejection) = verdict {
                out.push(Err(rejection));
                continue;
            }
            let result = answers.next().and_then(|r| r.outcome)
                .ok_or_else(|| protocol("the server returned a batch result with neither ack nor rejection".into()))?;
            out.push(match result {
                pb::enqueue_result::Outcome::Ack(ack) => Ok(ack_from(&ack).map_err(Error::Transport)?),
                pb::enqueue_result::Outcome::Rejection(r) => Err(Rejection::from_proto(&r)),
                #[allow(unreachable_patterns)] // an outcome a newer proto adds
                _ => return Err(protocol("the server returned a batch result of a kind this client does not know".into())),
            });
        }
        Ok(out)
    }

    /// Enqueue jobs all-or-nothing: every ack in request order, or nothing stored.
    ///
    /// Errors: `AtomicEnqueueError::Validation` with every failure by index when any job
    /// breaks a rule (nothing stored); `::Rejected` for an empty or over-cap batch;
    /// `::Transport` when no verdict came (retried first where safe).
    pub async fn enqueue_atomic(&self, requests: impl IntoIterator<Item = EnqueueRequest>)
                                -> Result<Vec<EnqueueAck>, AtomicEnqueueError> {
        let protos: Vec<pb::EnqueueRequest> = requests.into_iter().map(|r| r.to_proto()).collect();
        if self.inner.validate_locally {
            self.check_batch_size(protos.len()).await?;
            let errors: Vec<IndexedRejection> = self.verdicts(&protos).await?.into_iter().enumerate()
                .filter_map(|(index, v)| v.map(|rejection| IndexedRejection { index, rejection })).collect();
            if !errors.is_empty() {
                return Err(AtomicEnqueueError::Validation(errors));
            }
        }
        let keyed = protos.iter().all(|p| !p.idempotency_key.is_empty());
        let count = protos.len();
        let message = pb::EnqueueBatchRequest { jobs: protos, plain: Vec::new(), ..Default::default() };
        let response: pb::EnqueueAtomicResponse = match self.call("EnqueueAtomic", &message, keyed).await {
            Ok(r) => r,
            Err(Failure::Atomic(mut errors)) => {
                errors.sort_by_key(|e| e.index);
                return Err(AtomicEnqueueError::Validation(errors));
            }
            Err(other) => return Err(other.into_error().into()),
        };
        if response.acks.len() != count {
            return Err(protocol(format!("the server returned {} acks for {count} jobs", response.acks.len())).into());
        }
        response.acks.iter().map(|a| ack_from(a).map_err(AtomicEnqueueError::Transport)).collect()
    }

    /// The server's version, feature flags, persist and strict mode and limits, fetched
    /// now (and kept for local validation).
    pub async fn get_server_info(&self) -> Result<ServerInfo, Error> {
        Ok((*self.refresh_server_info().await?).clone())
    }

    /// Fetch `GetServerInfo` now and replace the cached copy.
    pub async fn refresh_server_info(&self) -> Result<Arc<ServerInfo>, Error> {
        let mut guard = self.inner.info.lock().await;
        let msg: pb::ServerInfo = self.call("GetServerInfo", &pb::GetServerInfoRequest::default(), true).await
            .map_err(Failure::into_error)?;
        let info = Arc::new(ServerInfo::from_proto(&msg));
        *guard = Some((info.clone(), Instant::now()));
        Ok(info)
    }

    /// The local verdict on `request` against the server's advertised limits (fetched if
    /// not cached): its rejection, or `None` when it passes. Sends nothing.
    pub async fn validate(&self, request: &EnqueueRequest) -> Result<Option<Rejection>, Error> {
        Ok(self.verdicts(&[request.to_proto()]).await?.pop().flatten())
    }

    // ------------------------------------------------------------------ internals

    async fn cached_info(&self) -> Result<(Arc<ServerInfo>, Instant), Error> {
        {
            let guard = self.inner.info.lock().await;
            if let Some((info, at)) = guard.as_ref() {
                if self.inner.server_info_ttl.map_or(true, |ttl| at.elapsed() < ttl) {
                    return Ok((info.clone(), *at));
                }
            }
        }
        let info = self.refresh_server_info().await?;
        Ok((info, Instant::now()))
    }

    /// Whether the server reads plain jobs by column (feature `enqueue_batch_plain`), as far
    /// as the cached info says (never fetched for this).
    async fn plain_wire(&self) -> bool {
        let guard = self.inner.info.lock().await;
        guard.as_ref().map_or(false, |(info, _)| info.has_feature(PLAIN_FEATURE))
    }

    async fn check_batch_size(&self, count: usize) -> Result<(), Error> {
        let (info, _) = self.cached_info().await?;
        match batch_size_rejection(count, info.limits.max_enqueue_batch) {
            Some(rejection) => Err(Error::Rejected(rejection)),
            None => Ok(()),
        }
    }

    /// Local verdicts of `protos`, in order (one clock reading); a local `UnknownQueue`
    /// re-fetches the server's info once when the copy is older than a second.
    async fn verdicts(&self, protos: &[pb::EnqueueRequest]) -> Result<Vec<Option<Rejection>>, Error> {
        let (info, fetched) = self.cached_info().await?;
        let verdicts = judge(&info, protos);
        let unknown = verdicts.iter().any(|v| matches!(v, Some(r) if r.code == RejectionCode::UnknownQueue));
        if unknown && fetched.elapsed() >= UNKNOWN_QUEUE_REFRESH_AFTER {
            let info = self.refresh_server_info().await?;
            return Ok(judge(&info, protos));
        }
        Ok(verdicts)
    }

    /// Call `ProducerService/method`, retrying per the policy; see `call_path`.
    async fn call<Req: Message, Resp: Message + Default>(&self, method: &str, request: &Req, idempotent: bool)
                                                          -> Result<Resp, Failure> {
        self.call_path(&format!("{PRODUCER}{method}"), request, idempotent, Duration::ZERO).await
    }

    /// Call `path`: each attempt has the client's timeout; a try that finds no connection
    /// waits for one within it once this client has reached a server (a restart), and
    /// fails at once on a first contact with nothing listening; transient failures are
    /// retried per the policy (`idempotent`: re-sending cannot make a duplicate). `extra`
    /// lengthens each attempt's deadline (a long-polling `Reserve`'s wait).
    pub(crate) async fn call_path<Req: Message, Resp: Message + Default>(&self, path: &str, request: &Req, idempotent: bool,
                                                                          extra: Duration) -> Result<Resp, Failure> {
        let inner = &self.inner;
        let mut attempt = 1;
        let mut maybe_sent = false;
        loop {
            let deadline = inner.timeout.map(|t| Instant::now() + t + extra);
            let failure = loop {
                let left = deadline.map(|d| d.saturating_duration_since(Instant::now()));
                match inner.channel.unary::<Req, Resp>(path, request, left).await {
                    Ok(response) => {
                        inner.reached.store(true, Ordering::Relaxed);
                        return Ok(response);
                    }
                    Err(error) => {
                        let no_connection = matches!(error, CallError::Connect(_) | CallError::NotSent(_)
                                                     | CallError::Timeout { sent: false });
                        if no_connection && (inner.reached.load(Ordering::Relaxed) || inner.wait_for_server_start) {
                            let left = deadline.map(|d| d.saturating_duration_since(Instant::now()));
                            if left.map_or(false, |l| l < Duration::from_millis(10)) {
                                let sent = if maybe_sent { "an earlier try may have reached the server" }
                                           else { "the call was never sent: safe to send again" };
                                break Failure::Transport(TransportError::new(TransportErrorKind::Unavailable,
                                    format!("server unavailable ({}): no connection within the {:?} deadline ({sent}); \
                                             last try: {error}", inner.target, inner.timeout.unwrap_or_default()))
                                    .with_not_sent(!maybe_sent));
                            }
                            tokio::time::sleep(left.map_or(CONNECT_POLL, |l| l.min(CONNECT_POLL))).await;
                            continue;
                        }
                        if let CallError::Connect(cause) = &error {
                            let message = if cause.contains("TLS handshake failed") {
                                format!("server unavailable ({}): {cause}", inner.target)
                            } else {
                                format!("{}: is sepp running on {}? ({cause})", first_contact_cause(cause), inner.target)
                            };
                            break Failure::Transport(TransportError::new(TransportErrorKind::Unavailable, message)
                                .with_not_sent(true));
                        }
                        if matches!(error, CallError::Status(_)) {
                            inner.reached.store(true, Ordering::Relaxed);
                        }
                        break classify(error, &inner.target);
                    }
                }
            };
            let error = match failure {
                Failure::Transport(error) => error,
                other => return Err(other),
            };
            maybe_sent = maybe_sent || !error.not_sent();
            match inner.retry.after(&error, attempt, idempotent) {
                Some(delay) => {
                    tokio::time::sleep(delay).await;
                    attempt += 1;
                }
                None => return Err(Failure::Transport(error)),
            }
        }
    }
}

fn first_contact_cause(cause: &str) -> &'static str {
    let lower = cause.to_lowercase();
    if lower.contains("refused") {
        "connection refused"
    } else if lower.contains("handshake") {
        "the address answered but is not a gRPC server"
    } else {
        "cannot connect"
    }
}

fn judge(info: &ServerInfo, protos: &[pb::EnqueueRequest]) -> Vec<Option<Rejection>> {
    let now_ns = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_nanos() as i128).unwrap_or(0);
    let lookup = |queue: &str| info.queue_limits(queue);
    protos.iter().map(|p| validate(p, &info.limits, &lookup, now_ns)).collect()
}

/// The jobs of a batch by column — one `PlainJobs` run per stretch of consecutive jobs with
/// the same queue, job type and encoding — when every job is plain (queue, job type and
/// payload, nothing else set); `None` otherwise. The server stores each as the
/// `EnqueueRequest` it stands for and answers in the same order, and reads it at a fraction
/// of a full message's cost.
fn plain_runs(jobs: &[pb::EnqueueRequest]) -> Option<Vec<pb::PlainJobs>> {
    let mut runs: Vec<pb::PlainJobs> = Vec::new();
    for job in jobs {
        let plain = job.custom.is_empty() && job.trace_context.is_empty() && job.priority.is_none()
            && job.max_attempts.is_none() && job.scheduled_at.is_none() && job.idempotency_key.is_empty();
        if !plain {
            return None;
        }
        let (data, encoding) = job.payload.as_ref().map_or((&[][..], ""), |p| (&p.data[..], p.encoding.as_str()));
        match runs.last_mut() {
            Some(run) if run.queue == job.queue && run.job_type == job.job_type && run.encoding == encoding => {
                run.data.push(data.to_vec());
            }
            _ => runs.push(pb::PlainJobs {
                queue: job.queue.clone(),
                job_type: job.job_type.clone(),
                encoding: encoding.to_string(),
                data: vec![data.to_vec()],
                ..Default::default()
            }),
        }
    }
    if runs.is_empty() { None } else { Some(runs) }
}

fn protocol(message: String) -> Error {
    Error::Transport(TransportError::new(TransportErrorKind::Server, message))
}

fn ack_from(ack: &pb::EnqueueAck) -> Result<EnqueueAck, TransportError> {
    let job_id = uuid::Uuid::parse_str(&ack.job_id).map_err(|_| {
        TransportError::new(TransportErrorKind::Server, format!("the server returned a job id that is not a UUID: {:?}", ack.job_id))
    })?;
    Ok(EnqueueAck { job_id, deduplicated: ack.deduplicated })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_jobs_travel_in_runs_of_one_queue_type_and_encoding_and_others_do_not() {
        let job = |q: &str, t: &str, enc: Option<&str>| pb::EnqueueRequest {
            queue: q.into(),
            job_type: t.into(),
            payload: enc.map(|e| pb::Payload { data: b"d".to_vec(), encoding: e.into() }),
            ..Default::default()
        };
        let runs = plain_runs(&[job("a", "t", None), job("a", "t", Some("")), job("a", "u", None), job("a", "t", Some("j"))]).unwrap();
        let shape: Vec<(&str, &str, &str, usize)> = runs.iter()
            .map(|r| (r.queue.as_str(), r.job_type.as_str(), r.encoding.as_str(), r.data.len())).collect();
        assert_eq!(shape, [("a", "t", "", 2), ("a", "u", "", 1), ("a", "t", "j", 1)]);
        assert_eq!(runs[0].data, vec![Vec::<u8>::new(), b"d".to_vec()]);
        let mut keyed = job("a", "t", None);
        keyed.idempotency_key = "k".into();
        assert!(plain_runs(&[job("a", "t", None), keyed]).is_none());
        assert!(plain_runs(&[]).is_none());
    }
}
