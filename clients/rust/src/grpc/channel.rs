//! One HTTP/2 connection to a gRPC server and unary calls over it.
//!
//! A `Channel` dials lazily, keeps one connection (HTTP/2 multiplexes every concurrent
//! call over it) and dials again after the connection breaks. Each call tells, when it
//! fails, whether the request provably never reached a server application
//! ([`CallError::never_sent`]) — the fact a caller needs to decide whether re-sending
//! can make a duplicate.

use std::fmt;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use h2::client::SendRequest;
use http::header::{HeaderName, HeaderValue};
use http::{Method, Request, Version};
use prost::Message;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::sync::Mutex;
use tokio::time::Instant;

use crate::grpc::codec::{frame, timeout_header, unframe, PREFIX_LEN};
use crate::grpc::status::{Code, Status};
use crate::grpc::tls::TlsConnector;

/// Flow-control windows this side grants the server (a stream, the whole connection),
/// bytes: large enough that a big answer (a `GetServerInfo` listing many queues, a
/// `Reserve` of many payloads) streams without waiting for window updates.
const STREAM_WINDOW: u32 = 4 * 1024 * 1024;
const CONNECTION_WINDOW: u32 = 16 * 1024 * 1024;

/// Why a unary call failed.
#[derive(Clone, Debug, PartialEq)]
pub enum CallError {
    /// No connection could be made (refused, unreachable, no such host): never sent.
    Connect(String),
    /// The request was not taken by any server application (the connection was gone
    /// before it went out, or the server refused the stream unprocessed): never sent.
    NotSent(String),
    /// The connection broke after the request went out: it may have been processed.
    Broken(String),
    /// The deadline passed; `sent` says whether the request had gone out by then.
    Timeout {
        /// Whether the request was written before the deadline passed.
        sent: bool,
    },
    /// The request is larger than the channel's message cap; not sent.
    TooLarge {
        /// The encoded request's size, bytes.
        size: usize,
        /// The cap, bytes.
        limit: usize,
    },
    /// The server answered with a non-OK gRPC status.
    Status(Status),
    /// The answer was not a well-formed gRPC answer (an HTTP server that is not gRPC, a
    /// message that does not decode): it may have been processed.
    Protocol(String),
}

impl CallError {
    /// Whether the request provably never reached a server application, so sending it
    /// again cannot duplicate anything.
    pub fn never_sent(&self) -> bool {
        matches!(self, CallError::Connect(_) | CallError::NotSent(_) | CallError::TooLarge { .. }
                 | CallError::Timeout { sent: false })
    }
}

impl fmt::Display for CallError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CallError::Connect(m) => write!(f, "cannot connect: {m}"),
            CallError::NotSent(m) => write!(f, "not sent: {m}"),
            CallError::Broken(m) => write!(f, "connection lost: {m}"),
            CallError::Timeout { sent: true } => f.write_str("the deadline passed before the server answered"),
            CallError::Timeout { sent: false } => f.write_str("the deadline passed before a connection was made"),
            CallError::TooLarge { size, limit } => write!(f, "the request is {size} bytes, over the {limit}-byte message cap"),
            CallError::Status(s) => write!(f, "{s}"),
            CallError::Protocol(m) => write!(f, "not a gRPC answer: {m}"),
        }
    }
}

impl std::error::Error for CallError {}

/// What a `Channel` sends with every call.
#[derive(Clone, Debug)]
pub struct ChannelOptions {
    /// Largest message sent or received, bytes.
    pub max_message_bytes: usize,
    /// Headers sent with every call (e.g. `authorization: Bearer …`).
    pub metadata: Vec<(HeaderName, HeaderValue)>,
    /// The `user-agent` header.
    pub user_agent: String,
    /// TLS for every connection (`None`: plaintext HTTP/2).
    pub tls: Option<TlsConnector>,
}

impl Default for ChannelOptions {
    fn default() -> Self {
        ChannelOptions {
            max_message_bytes: 16 * 1024 * 1024,
            metadata: Vec::new(),
            user_agent: concat!("sepp-rs/", env!("CARGO_PKG_VERSION")).to_string(),
            tls: None,
        }
    }
}

/// An HTTP/2 channel to `HOST:PORT` (plaintext, or TLS when the options carry it), shared
/// by clones.
#[derive(Clone)]
pub struct Channel {
    inner: Arc<Inner>,
}

struct Inner {
    address: String,
    options: ChannelOptions,
    /// The live connection and its generation (bumped on every dial).
    conn: Mutex<(u64, Option<Live>)>,
}

/// A connection's sender, and whether any byte has come from the server on it yet.
#[derive(Clone)]
struct Live {
    sender: SendRequest<Bytes>,
    heard: Arc<AtomicBool>,
}

/// The connection's byte stream, noting in `heard` that the server has sent something.
struct Heard<T> {
    io: T,
    heard: Arc<AtomicBool>,
}

impl<T: AsyncRead + Unpin> AsyncRead for Heard<T> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.io).poll_read(cx, buf);
        if buf.filled().len() > before {
            self.heard.store(true, Ordering::Relaxed);
        }
        polled
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Heard<T> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, data: &[u8]) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.io).poll_write(cx, data)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

impl fmt::Debug for Channel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Channel").field("address", &self.inner.address).finish()
    }
}

impl Channel {
    /// A channel to `address` (`HOST:PORT`); nothing is dialled until the first call.
    pub fn new(address: impl Into<String>, options: ChannelOptions) -> Channel {
        Channel { inner: Arc::new(Inner { address: address.into(), options, conn: Mutex::new((0, None)) }) }
    }

    /// The `HOST:PORT` this channel dials.
    pub fn address(&self) -> &str {
        &self.inner.address
    }

    /// Call `path` (`/package.Service/Method`) with `request`, within `timeout` (sent as
    /// `grpc-timeout` too), and decode the answer.
    pub async fn unary<Req: Message, Resp: Message + Default>(&self, path: &str, request: &Req,
                                                             timeout: Option<Duration>) -> Result<Resp, CallError> {
        let body = self.unary_bytes(path, Bytes::from(request.encode_to_vec()), timeout).await?;
        Resp::decode(body).map_err(|e| CallError::Protocol(format!("the answer of {path} does not decode: {e}")))
    }

    /// `unary` with the request already encoded and the answer's message bytes returned.
    pub async fn unary_bytes(&self, path: &str, message: Bytes, timeout: Option<Duration>) -> Result<Bytes, CallError> {
        let limit = self.inner.options.max_message_bytes;
        if message.len() > limit {
            return Err(CallError::TooLarge { size: message.len(), limit });
        }
        let deadline = timeout.map(|t| Instant::now() + t);
        let sender = match deadline {
            Some(at) => tokio::time::timeout_at(at, self.ready()).await.map_err(|_| CallError::Timeout { sent: false })??,
            None => self.ready().await?,
        };
        let exchange = self.exchange(sender, path, message, timeout);
        match deadline {
            Some(at) => tokio::time::timeout_at(at, exchange).await.map_err(|_| CallError::Timeout { sent: true })?,
            None => exchange.await,
        }
    }

    /// A connection ready for a new stream: the current one, or a new one when there is
    /// none or it has closed.
    async fn ready(&self) -> Result<Live, CallError> {
        let (generation, current) = {
            let guard = self.inner.conn.lock().await;
            (guard.0, guard.1.clone())
        };
        if let Some(Live { sender, heard }) = current {
            match sender.ready().await {
                Ok(sender) => return Ok(Live { sender, heard }),
                Err(_) => {
                    let mut guard = self.inner.conn.lock().await;
                    if guard.0 == generation {
                        guard.1 = None;
                    }
                }
            }
        }
        let mut guard = self.inner.conn.lock().await;
        if guard.0 != generation {
            if let Some(Live { sender, heard }) = guard.1.clone() {
                drop(guard);
                let sender = sender.ready().await.map_err(|e| CallError::NotSent(e.to_string()))?;
                return Ok(Live { sender, heard });
            }
        }
        let live = self.dial().await?;
        guard.0 += 1;
        guard.1 = Some(live.clone());
        drop(guard);
        let sender = live.sender.ready().await.map_err(|e| CallError::NotSent(e.to_string()))?;
        Ok(Live { sender, heard: live.heard })
    }

    async fn dial(&self) -> Result<Live, CallError> {
        let address = &self.inner.address;
        let tcp = TcpStream::connect(address).await.map_err(|e| CallError::Connect(format!("{address}: {e}")))?;
        let _ = tcp.set_nodelay(true);
        match &self.inner.options.tls {
            None => self.handshake(tcp).await,
            Some(tls) => {
                let stream = tls.connect(tcp).await
                    .map_err(|e| CallError::Connect(format!("{address}: TLS handshake failed ({e})")))?;
                self.handshake(stream).await
            }
        }
    }

    async fn handshake<T: AsyncRead + AsyncWrite + Unpin + Send + 'static>(&self, io: T) -> Result<Live, CallError> {
        let address = &self.inner.address;
        let heard = Arc::new(AtomicBool::new(false));
        let io = Heard { io, heard: heard.clone() };
        let (sender, connection) = h2::client::Builder::new()
            .initial_window_size(STREAM_WINDOW)
            .initial_connection_window_size(CONNECTION_WINDOW)
            .handshake::<_, Bytes>(io)
            .await
            .map_err(|e| CallError::Connect(format!("{address}: HTTP/2 handshake failed: {e}")))?;
        tokio::spawn(async move {
            let _ = connection.await; // ends when the connection closes; calls then see the error
        });
        Ok(Live { sender, heard })
    }

    async fn exchange(&self, live: Live, path: &str, message: Bytes,
                      timeout: Option<Duration>) -> Result<Bytes, CallError> {
        let options = &self.inner.options;
        let Live { mut sender, heard } = live;
        let after_send = |e: h2::Error| self.after_send(e, &heard);
        let mut builder = Request::builder()
            .method(Method::POST)
            .version(Version::HTTP_2)
            .uri(format!("{}://{}{}", if options.tls.is_some() { "https" } else { "http" }, self.inner.address, path))
            .header("content-type", "application/grpc")
            .header("te", "trailers")
            .header("user-agent", options.user_agent.as_str());
        if let Some(t) = timeout {
            builder = builder.header("grpc-timeout", timeout_header(t));
        }
        let mut request = builder.body(()).map_err(|e| CallError::NotSent(format!("bad request head: {e}")))?;
        for (name, value) in &options.metadata {
            request.headers_mut().append(name.clone(), value.clone());
        }
        let (response, mut stream) = sender.send_request(request, false).map_err(|e| CallError::NotSent(e.to_string()))?;

        // The whole message is handed to h2 at once: it goes out with the headers in one write
        // (a capacity round trip first would split them and cost a scheduling turn per call),
        // and h2 holds what the peer's flow-control window does not admit yet until it does.
        stream.send_data(frame(&message), true).map_err(after_send)?;

        let response = response.await.map_err(after_send)?;
        let (head, mut body) = response.into_parts();
        if head.status != http::StatusCode::OK {
            return Err(CallError::Protocol(format!("HTTP status {} (is {} a gRPC server?)", head.status, self.inner.address)));
        }
        if let Some(status) = head.headers.get("grpc-status") {
            // Trailers-only: the status came with the headers and there is no body.
            return Err(check(status_of(&head.headers, status.as_bytes()), path)
                .err()
                .unwrap_or_else(|| CallError::Protocol(format!("{path} answered OK without a message"))));
        }
        let mut buffer = BytesMut::new();
        let most = options.max_message_bytes + PREFIX_LEN;
        while let Some(chunk) = body.data().await {
            let chunk = chunk.map_err(after_send)?;
            let _ = body.flow_control().release_capacity(chunk.len());
            buffer.extend_from_slice(&chunk);
            if buffer.len() > most {
                return Err(CallError::Protocol(format!("the answer of {path} exceeds the {}-byte message cap",
                                                       options.max_message_bytes)));
            }
        }
        let trailers = body.trailers().await.map_err(after_send)?.unwrap_or_default();
        let status = trailers.get("grpc-status")
            .ok_or_else(|| CallError::Protocol(format!("the answer of {path} has no grpc-status")))?;
        check(status_of(&trailers, status.as_bytes()), path)?;
        let buffer = buffer.freeze();
        match unframe(&buffer) {
            Ok(Some(msg)) => Ok(buffer.slice_ref(msg)),
            Ok(None) => Err(CallError::Protocol(format!("{path} answered OK without a message"))),
            Err(why) => Err(CallError::Protocol(why)),
        }
    }
}

fn status_of(headers: &http::HeaderMap, status: &[u8]) -> Status {
    Status::from_headers(status, headers.get("grpc-message").map(|v| v.as_bytes()),
                         headers.get("grpc-status-details-bin").map(|v| v.as_bytes()))
}

fn check(status: Status, _path: &str) -> Result<(), CallError> {
    if status.code() == Code::Ok {
        Ok(())
    } else {
        Err(CallError::Status(status))
    }
}

impl Channel {
    /// An HTTP/2 error once the request may have gone out: a stream the server refused
    /// unprocessed (`REFUSED_STREAM`, e.g. above a GOAWAY's last stream) was never sent;
    /// anything else may have been processed. A connection the server closed before
    /// sending a single byte (not even its HTTP/2 settings) gets a hint: that is what a
    /// server requiring a client certificate does to a TLS client without one, and what a
    /// TLS server does to a plaintext client. (Still "may have been processed": bytes the
    /// server sent can be lost to a reset before they are read.)
    fn after_send(&self, error: h2::Error, heard: &AtomicBool) -> CallError {
        if error.reason() == Some(h2::Reason::REFUSED_STREAM) {
            return CallError::NotSent(error.to_string());
        }
        if heard.load(Ordering::Relaxed) {
            return CallError::Broken(error.to_string());
        }
        let hint = if self.inner.options.tls.is_some() {
            "the server closed the connection without answering anything: it may require a client certificate \
             (tls_cert/tls_key) signed by its tls_client_ca"
        } else {
            "the server closed the connection without answering anything: if it serves TLS, use https:// and \
             its CA (tls_ca)"
        };
        CallError::Broken(format!("{error}; {hint}"))
    }
}
