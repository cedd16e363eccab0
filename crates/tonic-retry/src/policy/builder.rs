//! Building a [`RetryPolicy`] from values a user hands us, each checked once.
//!
//! A policy's numbers come from code, configuration files and service
//! configs; a typo there (`1e300`, `Duration::MAX`) must not become a panic
//! deep inside a retry loop an hour later, when a getter or the clock first
//! does arithmetic on it. Every value is checked here, where it enters, and
//! a bad one is an [`InvalidPolicy`] naming the field.

use std::sync::Arc;
use std::time::Duration;

use super::{Classifier, MAX_POLICY_MS, RetryPolicy};

/// The longest duration a policy accepts for any of its waits
/// (`initial_backoff`, `max_backoff`, `jitter`, `min_jitter_threshold`,
/// `max_server_retry_delay`): 365 days. Longer is no retry policy but a
/// typo, and anything up to it converts to a [`Duration`], adds to any
/// clock reading and sums over `u32::MAX` waits without overflow.
#[cfg(test)]
pub(crate) const MAX_POLICY_DURATION: Duration = Duration::from_secs(365 * 24 * 60 * 60);

/// A duration in (fractional) milliseconds, saturating: `Duration::MAX` is
/// far above the 365-day maximum and is rejected as such.
fn duration_ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

impl RetryPolicy {
    /// A builder that starts from [`RetryPolicy::default`].
    ///
    /// A policy built without [`name`](RetryPolicyBuilder::name) keeps the
    /// default's name only if nothing was changed; a changed classifier or
    /// number makes it `"custom"`, so logs never
    /// present a custom policy as the default.
    pub fn builder() -> RetryPolicyBuilder {
        RetryPolicyBuilder::starting_from(RetryPolicy::default)
    }
}

/// A setting out of range: a retry policy's parameter, a hedging policy's
/// (`max_attempts`) or retry throttling's (`max_tokens`, `token_ratio`).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("invalid {setting}: `{field}` = {value} {reason}")]
pub struct InvalidPolicy {
    setting: &'static str,
    field: &'static str,
    value: f64,
    reason: &'static str,
}

impl InvalidPolicy {
    /// A retry policy's `field` is `value`, which `reason` rules out.
    pub(crate) fn retry(field: &'static str, value: f64, reason: &'static str) -> Self {
        Self::of("retry policy", field, value, reason)
    }
    /// `setting`'s `field` is `value`, which `reason` rules out.
    pub(crate) fn of(
        setting: &'static str,
        field: &'static str,
        value: f64,
        reason: &'static str,
    ) -> Self {
        InvalidPolicy {
            setting,
            field,
            value,
            reason,
        }
    }
    /// The name of the offending field, e.g. `"backoff_multiplier"`.
    pub fn field(&self) -> &'static str {
        self.field
    }
    /// The rejected value.
    pub fn value(&self) -> f64 {
        self.value
    }
    /// What is wrong with it, e.g. `"is negative"`.
    pub fn reason(&self) -> &'static str {
        self.reason
    }
}

/// Builds a validated [`RetryPolicy`].
///
/// Millisecond setters (`*_ms`) take `f64` (fractional milliseconds); negative, NaN or infinite values, and durations longer than
/// 365 days, make [`build`](Self::build) fail with
/// an [`InvalidPolicy`] naming the field. A built policy's getters and its
/// arithmetic therefore never panic.
///
/// ```
/// use std::time::Duration;
/// use tonic_retry::policy::RetryPolicy;
///
/// let e = RetryPolicy::builder().initial_backoff(Duration::MAX).build().unwrap_err();
/// assert_eq!(e.field(), "initial_backoff");
/// assert_eq!(RetryPolicy::builder().jitter_ms(1e300).build().unwrap_err().field(), "jitter");
/// ```
#[derive(Debug, Clone)]
#[must_use]
pub struct RetryPolicyBuilder {
    policy: RetryPolicy,
    error: Option<InvalidPolicy>,
    /// The policy the builder started from, for the naming rule.
    origin: fn() -> RetryPolicy,
    named: bool,
    classifier_set: bool,
}

/// The name of a policy built with a changed classifier or changed
/// numbers but no [`name`](RetryPolicyBuilder::name): logs never call a
/// custom policy `DefaultPolicy`.
pub(crate) const CUSTOM_POLICY_NAME: &str = "custom";

impl RetryPolicyBuilder {
    /// A builder starting from `origin()`, for a crate with defaults of its
    /// own: the built policy keeps `origin()`'s name while nothing is
    /// changed, and is `"custom"` once something is (unless
    /// [`name`](Self::name) is set).
    ///
    /// ```
    /// use std::time::Duration;
    /// use tonic_retry::policy::{RetryPolicy, RetryPolicyBuilder};
    ///
    /// fn patient() -> RetryPolicy {
    ///     RetryPolicy::builder().name("patient").max_retries(Some(10)).build().unwrap()
    /// }
    /// assert_eq!(RetryPolicyBuilder::starting_from(patient).build()?.name(), "patient");
    /// let changed = RetryPolicyBuilder::starting_from(patient)
    ///     .initial_backoff(Duration::from_secs(1))
    ///     .build()?;
    /// assert_eq!((changed.name(), changed.max_retries()), ("custom", Some(10)));
    /// # Ok::<(), tonic_retry::policy::InvalidPolicy>(())
    /// ```
    pub fn starting_from(origin: fn() -> RetryPolicy) -> Self {
        RetryPolicyBuilder {
            policy: origin(),
            error: None,
            origin,
            named: false,
            classifier_set: false,
        }
    }
}

impl RetryPolicyBuilder {
    fn check(
        &mut self,
        field: &'static str,
        value: f64,
        allow_zero: bool,
        is_duration: bool,
    ) -> bool {
        let reason = if value.is_nan() {
            Some("is not a number")
        } else if value.is_infinite() {
            Some("is not finite")
        } else if value < 0.0 {
            Some("is negative")
        } else if !allow_zero && value == 0.0 {
            Some("must be greater than zero")
        } else if is_duration && value > MAX_POLICY_MS {
            Some("is longer than the maximum of 365 days (31 536 000 000 ms)")
        } else {
            None
        };
        match reason {
            Some(reason) => {
                if self.error.is_none() {
                    self.error = Some(InvalidPolicy::retry(field, value, reason));
                }
                false
            }
            None => true,
        }
    }

    /// The policy's name, for logs.
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.policy.name = Arc::from(name.into());
        self.named = true;
        self
    }
    /// The classifier deciding which errors are retried.
    pub fn classifier(self, classifier: impl Classifier + 'static) -> Self {
        self.classifier_arc(Arc::new(classifier))
    }
    /// A shared classifier.
    pub fn classifier_arc(mut self, classifier: Arc<dyn Classifier>) -> Self {
        self.policy.classifier = classifier;
        self.classifier_set = true;
        self
    }
    /// Maximum number of retries (`None`: unlimited).
    pub fn max_retries(mut self, max_retries: Option<u32>) -> Self {
        self.policy.max_retries = max_retries;
        self
    }
    /// The first wait.
    pub fn initial_backoff(self, d: Duration) -> Self {
        self.initial_backoff_ms(duration_ms(d))
    }
    /// The first wait, in milliseconds.
    pub fn initial_backoff_ms(mut self, ms: f64) -> Self {
        if self.check("initial_backoff", ms, true, true) {
            self.policy.initial_backoff_ms = ms;
        }
        self
    }
    /// Cap on the computed backoff; `None` freezes the wait at `initial_backoff`.
    pub fn max_backoff(self, d: Option<Duration>) -> Self {
        self.max_backoff_ms(d.map(duration_ms))
    }
    /// Cap on the computed backoff, in milliseconds.
    pub fn max_backoff_ms(mut self, ms: Option<f64>) -> Self {
        match ms {
            Some(ms) if self.check("max_backoff", ms, true, true) => {
                self.policy.max_backoff_ms = Some(ms)
            }
            Some(_) => {}
            None => self.policy.max_backoff_ms = None,
        }
        self
    }
    /// Growth factor (unitless). Must be finite and greater than zero.
    pub fn backoff_multiplier(mut self, m: f64) -> Self {
        if self.check("backoff_multiplier", m, false, false) {
            self.policy.backoff_multiplier = m;
        }
        self
    }
    /// Upper bound of the uniform jitter.
    pub fn jitter(self, d: Duration) -> Self {
        self.jitter_ms(duration_ms(d))
    }
    /// Upper bound of the uniform jitter, in milliseconds.
    pub fn jitter_ms(mut self, ms: f64) -> Self {
        if self.check("jitter", ms, true, true) {
            self.policy.jitter_ms = ms;
        }
        self
    }
    /// Waits below this value get no jitter.
    pub fn min_jitter_threshold(self, d: Duration) -> Self {
        self.min_jitter_threshold_ms(duration_ms(d))
    }
    /// Waits below this value (ms) get no jitter.
    pub fn min_jitter_threshold_ms(mut self, ms: f64) -> Self {
        if self.check("min_jitter_threshold", ms, true, true) {
            self.policy.min_jitter_threshold_ms = ms;
        }
        self
    }
    /// Use `google.rpc.RetryInfo.retry_delay` as a minimum wait.
    pub fn recognize_server_retry_delay(mut self, yes: bool) -> Self {
        self.policy.recognize_server_retry_delay = yes;
        self
    }
    /// Cap on the delay a server may ask for (`None`: uncapped).
    pub fn max_server_retry_delay(self, d: Option<Duration>) -> Self {
        self.max_server_retry_delay_ms(d.map(duration_ms))
    }
    /// Cap on the delay a server may ask for, in milliseconds.
    pub fn max_server_retry_delay_ms(mut self, ms: Option<f64>) -> Self {
        match ms {
            Some(ms) if self.check("max_server_retry_delay", ms, true, true) => {
                self.policy.max_server_retry_delay_ms = Some(ms)
            }
            Some(_) => {}
            None => self.policy.max_server_retry_delay_ms = None,
        }
        self
    }

    /// Proportional jitter, as gRFC A6 (2024 revision) specifies with
    /// `factor = 0.2`: each wait is the backoff times a uniform sample of
    /// `[1 - factor, 1 + factor)`. A factor above 0 replaces the additive
    /// [`jitter`](Self::jitter); it must be in `0..=1`.
    pub fn proportional_jitter(mut self, factor: f64) -> Self {
        if self.check("proportional_jitter", factor, true, false) {
            if factor > 1.0 {
                if self.error.is_none() {
                    self.error = Some(InvalidPolicy::retry(
                        "proportional_jitter",
                        factor,
                        "must be at most 1",
                    ));
                }
            } else {
                self.policy.jitter_factor = factor;
            }
        }
        self
    }

    /// Validate and build. The first invalid value set is reported.
    ///
    /// Without a [`name`](Self::name), a policy whose classifier was set or
    /// whose numbers differ from the builder's start is named
    /// `"custom"`.
    pub fn build(mut self) -> Result<RetryPolicy, InvalidPolicy> {
        if let Some(e) = self.error {
            return Err(e);
        }
        if !self.named && (self.classifier_set || !self.policy.same_numbers(&(self.origin)())) {
            self.policy.name = Arc::from(CUSTOM_POLICY_NAME);
        }
        Ok(self.policy)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unnamed_changed_policies_are_custom() {
        let name = |b: RetryPolicyBuilder| b.build().unwrap().name().to_owned();
        assert_eq!(RetryPolicy::default().name(), "default");
        assert_eq!(name(RetryPolicy::builder()), "default");
        assert_eq!(name(RetryPolicy::builder().max_retries(Some(4))), "default");
        assert_eq!(name(RetryPolicy::builder().max_retries(Some(3))), "custom");
        assert_eq!(name(RetryPolicy::builder().jitter_ms(1.0)), "custom");
        let codes = super::super::CodeClassifier::new([tonic::Code::Aborted]);
        assert_eq!(
            name(RetryPolicy::builder().classifier(codes.clone())),
            "custom"
        );
        assert_eq!(
            name(RetryPolicy::builder().classifier(codes).name("aborted")),
            "aborted"
        );
        assert_eq!(
            name(RetryPolicy::builder().name("default").jitter_ms(1.0)),
            "default"
        );
    }

    #[test]
    fn durations_past_the_maximum_are_rejected_naming_the_field() {
        type Set = fn(RetryPolicyBuilder) -> RetryPolicyBuilder;
        let cases: [(&str, Set); 9] = [
            ("initial_backoff", |b| b.initial_backoff(Duration::MAX)),
            ("initial_backoff", |b| b.initial_backoff_ms(1e300)),
            ("max_backoff", |b| b.max_backoff(Some(Duration::MAX))),
            ("max_backoff", |b| b.max_backoff_ms(Some(1e300))),
            ("jitter", |b| b.jitter(Duration::MAX)),
            ("min_jitter_threshold", |b| {
                b.min_jitter_threshold(Duration::MAX)
            }),
            ("min_jitter_threshold", |b| b.min_jitter_threshold_ms(1e300)),
            ("max_server_retry_delay", |b| {
                b.max_server_retry_delay(Some(Duration::MAX))
            }),
            ("max_server_retry_delay", |b| {
                b.max_server_retry_delay_ms(Some(MAX_POLICY_MS + 1.0))
            }),
        ];
        for (field, set) in cases {
            let e = set(RetryPolicy::builder()).build().unwrap_err();
            assert_eq!(e.field(), field);
            assert!(e.to_string().contains("365 days"), "{e}");
        }
    }

    #[test]
    fn the_maximum_itself_is_accepted_and_getters_do_not_panic() {
        let p = RetryPolicy::builder()
            .max_retries(Some(15))
            .initial_backoff(MAX_POLICY_DURATION)
            .max_backoff(Some(MAX_POLICY_DURATION))
            .jitter(MAX_POLICY_DURATION)
            .min_jitter_threshold(MAX_POLICY_DURATION)
            .max_server_retry_delay(Some(MAX_POLICY_DURATION))
            .backoff_multiplier(f64::MAX)
            .build()
            .unwrap();
        assert_eq!(p.initial_backoff(), MAX_POLICY_DURATION);
        assert_eq!(p.max_backoff(), Some(MAX_POLICY_DURATION));
        assert_eq!(p.jitter(), MAX_POLICY_DURATION);
        assert_eq!(p.min_jitter_threshold(), MAX_POLICY_DURATION);
        assert_eq!(p.max_server_retry_delay(), Some(MAX_POLICY_DURATION));
        let mut waits = p.backoff();
        for _ in 0..15 {
            let w = waits.next(Some(Duration::MAX), &mut || 0.999);
            assert!(w.is_some_and(|w| w <= MAX_POLICY_DURATION * 2), "{w:?}");
        }
    }
}
