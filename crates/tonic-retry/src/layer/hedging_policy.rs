//! A gRFC A6 `hedgingPolicy` as a value: how many copies of a call, how far
//! apart, and which answers let the others go on.
//!
//! A setting, checked where it is built; the rules that act on it are
//! `hedging_machine`'s.

use std::time::Duration;

use tonic::Code;

use crate::policy::InvalidPolicy;

/// A6's cap on `maxAttempts`: more is read as 5.
pub(crate) const MAX_HEDGED_ATTEMPTS: u32 = 5;

/// A gRFC A6 `hedgingPolicy`: up to `max_attempts` copies of a call,
/// `delay` apart, the first answer wins.
///
/// ```
/// use std::time::Duration;
/// use tonic_retry::layer::HedgingPolicy;
/// use tonic_retry::policy::InvalidPolicy;
/// use tonic::Code;
///
/// let p = HedgingPolicy::new(9, Duration::from_millis(5))?.non_fatal([Code::Unavailable]);
/// assert_eq!(p.max_attempts(), 5, "A6's cap");
/// assert!(p.is_non_fatal(Code::Unavailable) && !p.is_non_fatal(Code::Internal));
/// let e = HedgingPolicy::new(1, Duration::ZERO).unwrap_err();
/// assert_eq!((e.field(), e.value()), ("max_attempts", 1.0));
/// # Ok::<(), InvalidPolicy>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HedgingPolicy {
    max_attempts: u32,
    delay: Duration,
    non_fatal: Vec<Code>,
}

impl HedgingPolicy {
    /// At most `max_attempts` attempts (at least 2; more than 5 is read as
    /// 5), a new one every `delay` (zero: all at once) while none has
    /// answered. No status is non-fatal until [`non_fatal`](Self::non_fatal).
    pub fn new(max_attempts: u32, delay: Duration) -> Result<Self, InvalidPolicy> {
        if max_attempts < 2 {
            return Err(InvalidPolicy::of(
                "hedging policy",
                "max_attempts",
                f64::from(max_attempts),
                "must be at least 2",
            ));
        }
        Ok(HedgingPolicy {
            max_attempts: max_attempts.min(MAX_HEDGED_ATTEMPTS),
            delay,
            non_fatal: Vec::new(),
        })
    }
    /// The statuses after which the other attempts go on (and the next
    /// hedge starts at once); any other status ends the call.
    pub fn non_fatal(mut self, codes: impl IntoIterator<Item = Code>) -> Self {
        self.non_fatal = codes.into_iter().collect();
        self
    }
    /// Attempts at most, the first included.
    pub fn max_attempts(&self) -> u32 {
        self.max_attempts
    }
    /// The delay between attempts.
    pub fn delay(&self) -> Duration {
        self.delay
    }
    /// The policy with at most `n` attempts (a call's own cap).
    pub(crate) fn capped(&self, n: u32) -> Self {
        let mut capped = self.clone();
        capped.max_attempts = capped.max_attempts.min(n.max(1));
        capped
    }
    /// Whether `code` lets the other attempts go on.
    pub fn is_non_fatal(&self, code: Code) -> bool {
        self.non_fatal.contains(&code)
    }
}
