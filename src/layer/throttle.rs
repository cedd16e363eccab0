//! gRFC A6 retry throttling: a token bucket shared by every clone of a service.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};

/// gRFC A6 retry throttling.
///
/// The bucket starts full at `max_tokens`. Every failed attempt whose status
/// the policy would retry (or that carried a pushback) takes one token; every
/// successful call gives back `token_ratio`. Retries are allowed only while
/// the count is strictly above `max_tokens / 2`; a first attempt is never
/// throttled. Tokens are kept in thousandths, as A6 specifies three decimal
/// places for `tokenRatio`, so the arithmetic is exact and lock-free.
pub struct RetryThrottle {
    /// Current tokens, in thousandths.
    milli_tokens: AtomicU64,
    max_milli: u64,
    ratio_milli: u64,
}

impl fmt::Debug for RetryThrottle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RetryThrottle")
            .field("tokens", &self.tokens())
            .field("max_tokens", &(self.max_milli as f64 / 1000.0))
            .field("token_ratio", &(self.ratio_milli as f64 / 1000.0))
            .finish()
    }
}

impl RetryThrottle {
    /// A full bucket. A6 limits: `max_tokens` in `1..=1000` and a positive
    /// `token_ratio` (rounded to 3 decimals); out-of-range values are clamped
    /// into range rather than rejected, so a bad config can never panic.
    pub fn new(max_tokens: u32, token_ratio: f64) -> Self {
        let max_milli = u64::from(max_tokens.clamp(1, 1000)) * 1000;
        let ratio = if token_ratio.is_finite() {
            token_ratio
        } else {
            1.0
        };
        let ratio_milli = ((ratio * 1000.0).round() as i64).clamp(1, max_milli as i64) as u64;
        RetryThrottle {
            milli_tokens: AtomicU64::new(max_milli),
            max_milli,
            ratio_milli,
        }
    }

    /// The current token count.
    pub fn tokens(&self) -> f64 {
        self.milli_tokens.load(Ordering::Relaxed) as f64 / 1000.0
    }

    /// Whether a retry may be scheduled now (tokens > max_tokens / 2).
    pub fn allows_retry(&self) -> bool {
        self.milli_tokens.load(Ordering::Relaxed) > self.max_milli / 2
    }

    /// A failed attempt that counts toward throttling: one token less.
    pub fn on_failure(&self) {
        let _ = self
            .milli_tokens
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |t| {
                Some(t.saturating_sub(1000))
            });
    }

    /// A successful call: `token_ratio` tokens more, up to the maximum.
    pub fn on_success(&self) {
        let (ratio, max) = (self.ratio_milli, self.max_milli);
        let _ = self
            .milli_tokens
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |t| {
                // Skip the write when full: the common case stays a plain load.
                (t < max).then(|| (t + ratio).min(max))
            });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a6_arithmetic() {
        let t = RetryThrottle::new(10, 0.1);
        assert!(t.allows_retry());
        for _ in 0..4 {
            t.on_failure();
        }
        assert_eq!(t.tokens(), 6.0);
        assert!(t.allows_retry());
        t.on_failure();
        assert_eq!(t.tokens(), 5.0);
        assert!(!t.allows_retry(), "5 is not > 10/2");
        t.on_success();
        assert!(t.allows_retry());
        assert!((t.tokens() - 5.1).abs() < 1e-9);
        for _ in 0..100 {
            t.on_success();
        }
        assert_eq!(t.tokens(), 10.0);
        for _ in 0..100 {
            t.on_failure();
        }
        assert_eq!(t.tokens(), 0.0);
        // Garbage never panics.
        let t = RetryThrottle::new(0, f64::NAN);
        assert!(t.allows_retry());
    }
}
