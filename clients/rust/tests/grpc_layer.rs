//! The h2 unary gRPC layer against a live `sepp serve`: a call and its decoded answer,
//! statuses with their rich-error details (ErrorInfo, a packed Rejection,
//! AtomicRejections), UNIMPLEMENTED, an unreachable address (never sent), an HTTP/1 port,
//! a deadline, the message cap, and one connection shared by concurrent calls.

mod common;

use std::time::Duration;

use bytes::Bytes;
use sepp_rs::grpc::{CallError, Channel, ChannelOptions, Code};
use sepp_rs::proto::sepp_v1 as pb;

const PRODUCER: &str = "/sepp.api.v1.ProducerService";

fn channel(target: &str) -> Channel {
    Channel::new(target.trim_start_matches("http://"), ChannelOptions::default())
}

fn job(queue: &str, job_type: &str) -> pb::EnqueueRequest {
    pb::EnqueueRequest { queue: queue.into(), job_type: job_type.into(), ..Default::default() }
}

#[tokio::test]
async fn a_unary_call_returns_the_decoded_answer() {
    let ch = channel(&common::target());
    let info: pb::ServerInfo = ch.unary(&format!("{PRODUCER}/GetServerInfo"), &pb::GetServerInfoRequest::default(),
                                        Some(Duration::from_secs(10))).await.unwrap();
    assert!(!info.version.is_empty());
    assert_eq!(info.limits.unwrap().max_enqueue_batch, 256);
    let ack: pb::EnqueueAck = ch.unary(&format!("{PRODUCER}/Enqueue"), &job("rs-grpc", "t"), None).await.unwrap();
    assert_eq!(uuid::Uuid::parse_str(&ack.job_id).unwrap().get_version_num(), 7);
}

#[tokio::test]
async fn a_rejection_arrives_as_a_status_with_error_info_and_the_packed_rejection() {
    let ch = channel(&common::target());
    let mut request = job("rs-grpc", "t");
    request.priority = Some(10);
    let err = ch.unary::<_, pb::EnqueueAck>(&format!("{PRODUCER}/Enqueue"), &request, None).await.unwrap_err();
    let status = match err { CallError::Status(status) => status, other => panic!("{other:?}") };
    assert_eq!(status.code(), Code::InvalidArgument);
    assert_eq!(status.reason(), "INVALID_ARGUMENT");
    assert_eq!(status.metadata("field"), Some("priority"));
    assert_eq!((status.metadata("limit"), status.metadata("actual")), (Some("9"), Some("10")));
    let rejection = status.rejection.unwrap();
    assert_eq!((rejection.code, rejection.limit, rejection.actual), (1, Some(9), Some(10)));
    assert!(status.message.starts_with("InvalidArgument: priority"), "{}", status.message);
}

#[tokio::test]
async fn a_refused_atomic_batch_carries_every_failure_by_index() {
    let ch = channel(&common::target());
    let batch = pb::EnqueueBatchRequest { jobs: vec![job("rs-grpc", "t"), job("", "t"), job("rs-grpc", "")], plain: vec![], ..Default::default() };
    let err = ch.unary::<_, pb::EnqueueAtomicResponse>(&format!("{PRODUCER}/EnqueueAtomic"), &batch, None).await.unwrap_err();
    let status = match err { CallError::Status(status) => status, other => panic!("{other:?}") };
    assert_eq!((status.code(), status.reason()), (Code::InvalidArgument, "ATOMIC_BATCH_REJECTED"));
    let listed: Vec<(u32, i32)> = status.atomic.as_ref().unwrap().rejections.iter()
        .map(|r| (r.index, r.rejection.as_ref().unwrap().code)).collect();
    assert_eq!(listed, vec![(1, 2), (2, 3)]);
    assert_eq!(status.metadata("count"), Some("2"));
}

#[tokio::test]
async fn an_unknown_method_is_unimplemented() {
    let ch = channel(&common::target());
    let err = ch.unary::<_, pb::EnqueueAck>(&format!("{PRODUCER}/NoSuchMethod"), &job("q", "t"), None).await.unwrap_err();
    assert!(matches!(&err, CallError::Status(s) if s.code() == Code::Unimplemented), "{err:?}");
    assert!(!err.never_sent());
}

#[tokio::test]
async fn nothing_listening_is_a_connect_error_that_was_never_sent() {
    let ch = channel(&format!("127.0.0.1:{}", common::unused_port()));
    let err = ch.unary::<_, pb::ServerInfo>(&format!("{PRODUCER}/GetServerInfo"), &pb::GetServerInfoRequest::default(),
                                            Some(Duration::from_secs(5))).await.unwrap_err();
    assert!(matches!(err, CallError::Connect(_)), "{err:?}");
    assert!(err.never_sent());
}

#[tokio::test]
async fn an_http1_server_is_not_mistaken_for_grpc() {
    // A listener that answers HTTP/1.1 to anything, as sepp's own HTTP port would.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap().to_string();
    tokio::spawn(async move {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        while let Ok((mut socket, _)) = listener.accept().await {
            let mut buf = [0u8; 1024];
            let _ = socket.read(&mut buf).await;
            let _ = socket.write_all(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n").await;
        }
    });
    let ch = Channel::new(address, ChannelOptions::default());
    let err = ch.unary::<_, pb::ServerInfo>(&format!("{PRODUCER}/GetServerInfo"), &pb::GetServerInfoRequest::default(),
                                            Some(Duration::from_secs(5))).await.unwrap_err();
    assert!(!matches!(err, CallError::Status(_)), "{err:?}");
}

#[tokio::test]
async fn a_deadline_that_passes_after_sending_says_it_was_sent() {
    // A listener that accepts and never answers: the request goes out, no answer comes.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap().to_string();
    let hold = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((socket, _)) = listener.accept().await {
            held.push(socket);
        }
    });
    let ch = Channel::new(address, ChannelOptions::default());
    let err = ch.unary::<_, pb::ServerInfo>(&format!("{PRODUCER}/GetServerInfo"), &pb::GetServerInfoRequest::default(),
                                            Some(Duration::from_millis(300))).await.unwrap_err();
    assert!(matches!(err, CallError::Timeout { .. }), "{err:?}");
    hold.abort();
}

#[tokio::test]
async fn a_message_over_the_cap_is_refused_unsent_and_one_at_the_cap_goes_out() {
    let options = ChannelOptions { max_message_bytes: 1024, ..ChannelOptions::default() };
    let ch = Channel::new(common::target().trim_start_matches("http://"), options);
    let err = ch.unary_bytes(&format!("{PRODUCER}/Enqueue"), Bytes::from(vec![0u8; 1025]), None).await.unwrap_err();
    assert_eq!(err, CallError::TooLarge { size: 1025, limit: 1024 });
    assert!(err.never_sent());
    // A large message (well past one HTTP/2 frame and the initial window) travels whole.
    let mut big = job("rs-grpc", "big");
    big.payload = Some(pb::Payload { data: vec![7u8; 1024 * 1024], encoding: String::new(), ..Default::default() });
    let ack: pb::EnqueueAck = channel(&common::target()).unary(&format!("{PRODUCER}/Enqueue"), &big, None).await.unwrap();
    assert!(!ack.job_id.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_calls_share_one_connection() {
    let ch = channel(&common::target());
    let calls = (0..64).map(|i| {
        let ch = ch.clone();
        tokio::spawn(async move {
            ch.unary::<_, pb::EnqueueAck>(&format!("{PRODUCER}/Enqueue"), &job("rs-grpc", &format!("c{i}")), None).await
        })
    });
    let mut ids = std::collections::HashSet::new();
    for call in calls {
        ids.insert(call.await.unwrap().unwrap().job_id);
    }
    assert_eq!(ids.len(), 64);
}
