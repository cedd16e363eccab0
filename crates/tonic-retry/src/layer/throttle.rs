//! gRFC A6 retry throttling.
//!
//! When a backend is overloaded, every client retrying every failed call
//! multiplies the load that overloaded it. A6's answer is a token bucket
//! per server, shared by all calls: failures drain it, successes refill it,
//! and below half full the client stops retrying until the server recovers.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::policy::InvalidPolicy;

/// A6's bound on `maxTokens`.
pub(crate) const MAX_TOKENS_LIMIT: u32 = 1000;

/// gRFC A6 retry throttling: a token bucket shared by every clone of a service.
///
/// The bucket starts full at `max_tokens`. Every failed attempt whose status
/// the policy would retry (or that carried a pushback) takes one token; every
/// successful call gives back `token_ratio`. Retries are allowed only while
/// the count is strictly above `max_tokens / 2`; a first attempt is never
/// throttled. Tokens are kept in thousandths, as A6 specifies three decimal
/// places for `tokenRatio`, so the arithmetic is exact and lock-free.
///
/// ```
/// use tonic_retry::layer::RetryThrottle;
///
/// let t = RetryThrottle::new(10, 0.1).unwrap();
/// for _ in 0..5 {
///     t.on_failure();
/// }
/// assert!(!t.allows_retry(), "5 tokens is not more than 10 / 2");
/// t.on_success();
/// assert!(t.allows_retry());
/// assert_eq!(RetryThrottle::new(0, 0.1).unwrap_err().field(), "max_tokens");
/// ```
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
    /// A full bucket. A6's limits: `max_tokens` in `1..=1000`, and
    /// `token_ratio` finite and at least 0.001 (it is kept to three
    /// decimals, so a smaller ratio would never refill the bucket). Anything
    /// else is an [`InvalidPolicy`] naming the field.
    pub fn new(max_tokens: u32, token_ratio: f64) -> Result<Self, InvalidPolicy> {
        if !(1..=MAX_TOKENS_LIMIT).contains(&max_tokens) {
            return Err(InvalidPolicy::of(
                "retry throttling",
                "max_tokens",
                f64::from(max_tokens),
                "must be in 1..=1000",
            ));
        }
        let reason = if !token_ratio.is_finite() {
            Some("is not finite")
        } else if (token_ratio * 1000.0).round() < 1.0 {
            Some("must be at least 0.001")
        } else {
            None
        };
        if let Some(reason) = reason {
            return Err(InvalidPolicy::of(
                "retry throttling",
                "token_ratio",
                token_ratio,
                reason,
            ));
        }
        let max_milli = u64::from(max_tokens) * 1000;
        Ok(RetryThrottle {
            milli_tokens: AtomicU64::new(max_milli),
            max_milli,
            // Finite and positive: the cast cannot wrap (it saturates).
            ratio_milli: (token_ratio * 1000.0).round() as u64,
        })
    }

    /// A full bucket with the same settings.
    pub(crate) fn refilled(&self) -> RetryThrottle {
        RetryThrottle {
            milli_tokens: AtomicU64::new(self.max_milli),
            max_milli: self.max_milli,
            ratio_milli: self.ratio_milli,
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
                (t < max).then(|| t.saturating_add(ratio).min(max))
            });
    }
}

/// The throttle's bookkeeping after an attempt, for retried and hedged
/// calls alike (gRFC A6): a success (`failure` is `None`) gives back
/// `token_ratio`; a failure takes a token when the policy would retry it
/// (`retryable`: a retryable or non-fatal code) or when it carried a
/// pushback; any other failure leaves the bucket alone.
pub(crate) fn record(
    throttle: Option<&RetryThrottle>,
    failure: Option<&crate::policy::Failure<'_>>,
    retryable: bool,
) {
    let Some(throttle) = throttle else { return };
    match failure {
        None => throttle.on_success(),
        Some(f) if retryable || f.pushback().is_some() => throttle.on_failure(),
        Some(_) => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a6_arithmetic() {
        let t = RetryThrottle::new(10, 0.1).unwrap();
        for _ in 0..4 {
            t.on_failure();
        }
        assert_eq!(t.tokens(), 6.0);
        assert!(t.allows_retry());
        t.on_failure();
        assert!(!t.allows_retry(), "5 is not > 10/2");
        t.on_success();
        assert!((t.tokens() - 5.1).abs() < 1e-9);
        for _ in 0..100 {
            t.on_success();
        }
        assert_eq!(t.tokens(), 10.0);
        for _ in 0..100 {
            t.on_failure();
        }
        assert_eq!(t.tokens(), 0.0);
    }

    #[test]
    fn bad_values_are_rejected_not_clamped() {
        for (max, ratio, field) in [
            (0, 0.1, "max_tokens"),
            (1001, 0.1, "max_tokens"),
            (10, 0.0, "token_ratio"),
            (10, -1.0, "token_ratio"),
            (10, 0.0004, "token_ratio"),
            (10, f64::NAN, "token_ratio"),
            (10, f64::INFINITY, "token_ratio"),
        ] {
            let e = RetryThrottle::new(max, ratio).unwrap_err();
            assert_eq!(e.field(), field, "{max} {ratio}");
            assert!(e.to_string().contains(field), "{e}");
        }
        let t = RetryThrottle::new(1000, 1e300).unwrap();
        t.on_failure();
        t.on_success();
        assert_eq!(t.tokens(), 1000.0);
    }
}
