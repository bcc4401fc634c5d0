//! What a server says of itself (`GetServerInfo`): version, feature flags, modes and the
//! limits requests are validated against, server-wide and per queue.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use crate::proto::sepp_v1 as pb;

/// How the server persists a job before it acknowledges it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PersistMode {
    /// Each request is its own fsynced commit.
    Sync,
    /// Group commit: writes waiting at commit time share one fsync (the default).
    Group,
    /// Acked once handed to the OS; fsync in the background.
    Async,
    /// The server did not say.
    Unspecified,
}

impl PersistMode {
    fn from_wire(n: i32) -> PersistMode {
        match n {
            1 => PersistMode::Sync,
            2 => PersistMode::Group,
            3 => PersistMode::Async,
            _ => PersistMode::Unspecified,
        }
    }

    /// `"sync"`, `"group"`, `"async"` or `"unspecified"`.
    pub fn as_str(self) -> &'static str {
        match self {
            PersistMode::Sync => "sync",
            PersistMode::Group => "group",
            PersistMode::Async => "async",
            PersistMode::Unspecified => "unspecified",
        }
    }
}

/// Server-wide limits (the advertised ones; `max_message_bytes` is enforced, not
/// advertised). Sizes are bytes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServerLimits {
    /// Most jobs in one `enqueue_batch` / `enqueue_atomic` call (default 256).
    pub max_enqueue_batch: i64,
    /// Highest `max_attempts` a job may ask for (default 1,000).
    pub max_attempts_ceiling: i64,
    /// Longest queue name, UTF-8 bytes (default 128).
    pub max_queue_name_bytes: i64,
    /// Longest job type, UTF-8 bytes (default 256).
    pub max_job_type_bytes: i64,
    /// How far ahead `scheduled_at` may be (default 365 days).
    pub max_schedule_horizon: Duration,
    /// Longest idempotency key, UTF-8 bytes (default 256).
    pub max_idempotency_key_bytes: i64,
    /// Longest payload encoding label, UTF-8 bytes (default 128).
    pub max_encoding_bytes: i64,
    /// Most trace-context entries (default 8).
    pub max_trace_entries: i64,
    /// Longest trace-context value, UTF-8 bytes (default 512).
    pub max_trace_value_bytes: i64,
}

impl Default for ServerLimits {
    fn default() -> Self {
        ServerLimits {
            max_enqueue_batch: 256,
            max_attempts_ceiling: 1000,
            max_queue_name_bytes: 128,
            max_job_type_bytes: 256,
            max_schedule_horizon: Duration::from_secs(365 * 86_400),
            max_idempotency_key_bytes: 256,
            max_encoding_bytes: 128,
            max_trace_entries: 8,
            max_trace_value_bytes: 512,
        }
    }
}

impl ServerLimits {
    fn from_proto(msg: &pb::ServerLimits) -> ServerLimits {
        ServerLimits {
            max_enqueue_batch: msg.max_enqueue_batch,
            max_attempts_ceiling: msg.max_attempts_ceiling,
            max_queue_name_bytes: msg.max_queue_name_bytes,
            max_job_type_bytes: msg.max_job_type_bytes,
            max_schedule_horizon: duration(msg.max_schedule_horizon.as_ref()),
            max_idempotency_key_bytes: msg.max_idempotency_key_bytes,
            max_encoding_bytes: msg.max_encoding_bytes,
            max_trace_entries: msg.max_trace_entries,
            max_trace_value_bytes: msg.max_trace_value_bytes,
        }
    }
}

/// The per-queue limits a job is validated against. Sizes are bytes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QueueLimits {
    /// Largest `payload.data`; equal is allowed (default 1 MiB).
    pub max_payload_bytes: i64,
    /// When non-empty, the only encoding labels accepted (exact match).
    pub allowed_encodings: Vec<String>,
    /// Most custom-map entries (default 32).
    pub max_custom_entries: i64,
    /// Longest custom key, UTF-8 bytes (default 64).
    pub max_custom_key_bytes: i64,
    /// Largest custom map, Σ(key bytes + value size) (default 8,192).
    pub max_custom_bytes: i64,
}

impl Default for QueueLimits {
    fn default() -> Self {
        QueueLimits {
            max_payload_bytes: 1024 * 1024,
            allowed_encodings: Vec::new(),
            max_custom_entries: 32,
            max_custom_key_bytes: 64,
            max_custom_bytes: 8192,
        }
    }
}

impl QueueLimits {
    fn from_proto(msg: Option<&pb::QueueLimits>) -> QueueLimits {
        match msg {
            None => QueueLimits::default(),
            Some(msg) => QueueLimits {
                max_payload_bytes: msg.max_payload_bytes,
                allowed_encodings: msg.allowed_encodings.clone(),
                max_custom_entries: msg.max_custom_entries,
                max_custom_key_bytes: msg.max_custom_key_bytes,
                max_custom_bytes: msg.max_custom_bytes,
            },
        }
    }
}

/// A queue's settings as the server advertises them (the ones a producer or worker reads).
#[derive(Clone, Debug, PartialEq)]
pub struct QueueSettings {
    /// Priority of a job that sets none (0–9).
    pub default_priority: i32,
    /// `max_attempts` of a job that sets none.
    pub default_max_attempts: i32,
    /// Lease of a reservation that asks for none.
    pub lease_duration: Duration,
    /// How long an idempotency key stays claimed.
    pub dedup_window: Duration,
    /// The limits its jobs are validated against.
    pub limits: QueueLimits,
}

impl QueueSettings {
    fn from_proto(msg: Option<&pb::QueueSettings>) -> QueueSettings {
        let default = pb::QueueSettings::default();
        let msg = msg.unwrap_or(&default);
        QueueSettings {
            default_priority: msg.default_priority,
            default_max_attempts: msg.default_max_attempts,
            lease_duration: duration(msg.lease_duration.as_ref()),
            dedup_window: duration(msg.dedup_window.as_ref()),
            limits: QueueLimits::from_proto(msg.limits.as_ref()),
        }
    }
}

/// A queue the server knows.
#[derive(Clone, Debug, PartialEq)]
pub struct QueueInfo {
    /// Its name.
    pub name: String,
    /// Its settings and limits.
    pub settings: QueueSettings,
    /// Whether reservation is paused (enqueue still works).
    pub paused: bool,
    /// Declared (config or admin API), or created on first enqueue.
    pub declared: bool,
}

/// What `GetServerInfo` advertises: enough to validate requests locally.
#[derive(Clone, Debug, PartialEq)]
pub struct ServerInfo {
    /// The server's sepp version, e.g. `"0.1.0"`.
    pub version: String,
    /// Feature flags, e.g. `enqueue_atomic`, `idempotency`, `scheduling`.
    pub features: BTreeSet<String>,
    /// How the server persists before acking.
    pub persist_mode: PersistMode,
    /// In strict mode an undeclared queue is `UnknownQueue`.
    pub strict: bool,
    /// The server-wide limits.
    pub limits: ServerLimits,
    /// Settings a queue created on first enqueue gets.
    pub queue_defaults: QueueSettings,
    /// Every queue the server knows, by name.
    pub queues: BTreeMap<String, QueueInfo>,
    /// How long the server process has been running.
    pub uptime: Duration,
    /// The server's node name.
    pub node: String,
    /// The storage backend, `"sqlite"` or `"postgres"`.
    pub storage: String,
}

impl ServerInfo {
    /// Build from the wire `ServerInfo`.
    pub fn from_proto(msg: &pb::ServerInfo) -> ServerInfo {
        ServerInfo {
            version: msg.version.clone(),
            features: msg.features.iter().cloned().collect(),
            persist_mode: PersistMode::from_wire(msg.persist_mode),
            strict: msg.strict,
            limits: msg.limits.as_ref().map(ServerLimits::from_proto).unwrap_or_default(),
            queue_defaults: QueueSettings::from_proto(msg.queue_defaults.as_ref()),
            queues: msg.queues.iter().map(|q| {
                (q.name.clone(), QueueInfo {
                    name: q.name.clone(),
                    settings: QueueSettings::from_proto(q.settings.as_ref()),
                    paused: q.paused,
                    declared: q.declared,
                })
            }).collect(),
            uptime: duration(msg.uptime.as_ref()),
            node: msg.node.clone(),
            storage: msg.storage.clone(),
        }
    }

    /// The limits a job for `queue` is validated against: a known queue's own, else the
    /// queue defaults' — or `None` in strict mode (the job would be `UnknownQueue`).
    pub fn queue_limits(&self, queue: &str) -> Option<&QueueLimits> {
        match self.queues.get(queue) {
            Some(info) => Some(&info.settings.limits),
            None if self.strict => None,
            None => Some(&self.queue_defaults.limits),
        }
    }

    /// Whether the server advertises feature flag `name`.
    pub fn has_feature(&self, name: &str) -> bool {
        self.features.contains(name)
    }
}

fn duration(d: Option<&prost_types::Duration>) -> Duration {
    match d {
        Some(d) if d.seconds >= 0 && d.nanos >= 0 => Duration::new(d.seconds as u64, d.nanos as u32),
        _ => Duration::ZERO,
    }
}
