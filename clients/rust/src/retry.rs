//! When and how long to back off before trying a failed call again — only where that is
//! safe: the server said it stored nothing (overloaded), the call provably never reached a
//! server, or every job of it carries an idempotency key.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::error::{TransportError, TransportErrorKind};

/// How transient failures are retried.
///
/// A call is retried when the server said `OVERLOADED` (nothing was stored), when it
/// provably never reached a server ([`TransportError::not_sent`]), or on any other
/// transient failure (a lost connection, a passed deadline) when every job of the call
/// carries an idempotency key (`get_server_info` is always safe). Rejections, oversized
/// messages, credential errors and other server errors are never retried.
#[derive(Clone, Debug, PartialEq)]
pub struct RetryPolicy {
    /// Total tries including the first; 1 disables retrying.
    pub max_attempts: u32,
    /// Delay before the first retry.
    pub initial_backoff: Duration,
    /// Ceiling of the exponential delay.
    pub max_backoff: Duration,
    /// Growth factor per retry (≥ 1).
    pub multiplier: f64,
    /// Random spread as a fraction: the delay is scaled by a factor in `[1 − jitter, 1 + jitter]`.
    pub jitter: f64,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            max_attempts: 4,
            initial_backoff: Duration::from_millis(100),
            max_backoff: Duration::from_secs(5),
            multiplier: 2.0,
            jitter: 0.2,
        }
    }
}

impl RetryPolicy {
    /// A policy that never retries.
    pub fn disabled() -> RetryPolicy {
        RetryPolicy { max_attempts: 1, ..RetryPolicy::default() }
    }

    /// The wait before retry number `retry` (1 = the first): the exponential delay
    /// `min(max_backoff, initial_backoff × multiplier^(retry−1))` scaled by the jitter
    /// (`r` in [0, 1) picks the point); a server's `retry_after` is a floor, only
    /// lengthened by the jitter.
    pub fn delay(&self, retry: u32, retry_after: Option<Duration>, r: f64) -> Duration {
        let exp = self.initial_backoff.as_secs_f64() * self.multiplier.powi(retry.saturating_sub(1) as i32);
        let base = exp.min(self.max_backoff.as_secs_f64());
        let mut delay = (base * (1.0 - self.jitter + 2.0 * self.jitter * r)).max(0.0);
        if let Some(after) = retry_after {
            delay = delay.max(after.as_secs_f64() * (1.0 + self.jitter * r));
        }
        Duration::from_secs_f64(delay)
    }

    /// The wait before trying again after try `attempt` (1-based) failed with `error`, or
    /// `None` when the call must not be retried. `idempotent`: re-sending cannot make a
    /// duplicate (every job keyed, or a read).
    pub fn after(&self, error: &TransportError, attempt: u32, idempotent: bool) -> Option<Duration> {
        if attempt >= self.max_attempts || !error.transient() {
            return None;
        }
        if error.kind() == TransportErrorKind::Overloaded {
            return Some(self.delay(attempt, error.retry_after(), random()));
        }
        if !idempotent && !error.not_sent() {
            return None;
        }
        Some(self.delay(attempt, None, random()))
    }
}

/// A number in [0, 1) for the jitter: a few bits of the clock through a mixer (spreading
/// retries of many clients apart needs no cryptographic quality).
fn random() -> f64 {
    let nanos = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_nanos() as u64).unwrap_or(0);
    let mut x = nanos ^ 0x9E37_79B9_7F4A_7C15;
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^= x >> 31;
    (x >> 11) as f64 / (1u64 << 53) as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(kind: TransportErrorKind, not_sent: bool) -> TransportError {
        TransportError::new(kind, "x").with_not_sent(not_sent)
    }

    #[test]
    fn the_delay_grows_exponentially_to_its_ceiling_and_honours_retry_after_as_a_floor() {
        let p = RetryPolicy { jitter: 0.0, ..RetryPolicy::default() };
        let ms = |d: Duration| d.as_millis();
        assert_eq!([1, 2, 3, 10].map(|n| ms(p.delay(n, None, 0.5))), [100, 200, 400, 5000]);
        assert_eq!(ms(p.delay(1, Some(Duration::from_secs(2)), 0.0)), 2000);
        let jittered = RetryPolicy::default();
        assert_eq!(ms(jittered.delay(1, None, 0.0)), 80);
        assert_eq!(ms(jittered.delay(1, None, 0.999_999)), 119);
    }

    #[test]
    fn only_safe_calls_are_retried() {
        use TransportErrorKind::*;
        let p = RetryPolicy::default();
        assert!(p.after(&err(Overloaded, false), 1, false).is_some());
        assert!(p.after(&err(Unavailable, true), 1, false).is_some());
        assert!(p.after(&err(Unavailable, false), 1, false).is_none());
        assert!(p.after(&err(Unavailable, false), 1, true).is_some());
        assert!(p.after(&err(DeadlineExceeded, false), 1, true).is_some());
        assert!(p.after(&err(DeadlineExceeded, false), 1, false).is_none());
        for kind in [MessageTooLarge, Unauthenticated, PermissionDenied, Server] {
            assert!(p.after(&err(kind, true), 1, true).is_none(), "{kind:?}");
        }
        assert!(p.after(&err(Overloaded, false), 4, true).is_none());
        assert!(RetryPolicy::disabled().after(&err(Overloaded, false), 1, true).is_none());
    }
}
