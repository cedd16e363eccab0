//! Per-method settings: whether a method may be replayed, how its
//! responses are read, its deadline, policies and hedging.
//!
//! A retry is only as safe as the method it repeats: a read can be sent
//! twice, a write may not. These settings are the layer's knowledge of each
//! method, kept apart from the machinery that acts on them.

use std::time::Duration;

use super::hedging::{HedgingError, HedgingPolicy};
use crate::retrying::Retrying;

/// How the layer finds a response's gRPC status before committing to it
/// (see the [module docs](super)).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum ResponseKind {
    /// Decide per response: buffer the first message; trailers next means
    /// unary (status known, retry possible), a second message means a
    /// stream (committed). Holds a stream's first message until its second
    /// begins, so name streaming methods when known.
    #[default]
    Auto,
    /// One response message: buffer it and the trailers (up to the response cap).
    Unary,
    /// A server stream: retried only until its first message (gRFC A6 commit rule).
    ServerStreaming,
}

/// Per-method retry settings, keyed by gRPC path (`/package.Service/Method`).
#[derive(Debug, Clone)]
pub struct MethodConfig {
    idempotent: bool,
    retry: bool,
    kind: ResponseKind,
    pub(crate) timeout: Option<Duration>,
    retrying: Option<Retrying>,
    pub(crate) hedging: Option<HedgingPolicy>,
}

impl Default for MethodConfig {
    /// Not idempotent, [`ResponseKind::Auto`], retried under the layer's policies.
    fn default() -> Self {
        MethodConfig {
            idempotent: false,
            retry: true,
            kind: ResponseKind::Auto,
            timeout: None,
            retrying: None,
            hedging: None,
        }
    }
}

impl MethodConfig {
    /// A method safe to run twice: any failure the policy accepts is replayed.
    pub fn idempotent() -> Self {
        MethodConfig {
            idempotent: true,
            ..Self::default()
        }
    }
    /// A method that must not run twice: replayed only after failures that
    /// show the server did not start it (see the [module docs](super)).
    pub fn non_idempotent() -> Self {
        Self::default()
    }
    /// Never retried and never buffered: for bidirectional streams, whose
    /// request body may wait on the responses.
    pub fn passthrough() -> Self {
        MethodConfig {
            retry: false,
            ..Self::default()
        }
    }
    /// Set how the response status is found.
    pub fn with_kind(mut self, kind: ResponseKind) -> Self {
        self.kind = kind;
        self
    }
    /// The method's deadline across attempts, when the caller sets none
    /// shorter (a service config's `timeout`).
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }
    /// Policies for this method instead of the layer's.
    pub fn with_retrying(mut self, retrying: Retrying) -> Self {
        self.retrying = Some(retrying);
        self
    }
    /// Hedge the method instead of retrying it (gRFC A6; see
    /// [`hedge`](super::hedge)). Hedging runs a call more than once on
    /// purpose, so a method that is not idempotent (or is passed through)
    /// is a [`HedgingError::NotIdempotent`].
    pub fn with_hedging(mut self, policy: HedgingPolicy) -> Result<Self, HedgingError> {
        if !self.idempotent || !self.retry {
            return Err(HedgingError::NotIdempotent("this method".to_owned()));
        }
        self.hedging = Some(policy);
        Ok(self)
    }
    /// The method's hedging policy, if it is hedged.
    pub fn hedging(&self) -> Option<&HedgingPolicy> {
        self.hedging.as_ref()
    }
    /// Whether the method is idempotent.
    pub fn is_idempotent(&self) -> bool {
        self.idempotent
    }
    /// Whether the method is retried at all.
    pub fn is_retried(&self) -> bool {
        self.retry
    }
    /// How the response status is found.
    pub fn kind(&self) -> ResponseKind {
        self.kind
    }
    /// The method's own deadline, if set.
    pub fn timeout(&self) -> Option<Duration> {
        self.timeout
    }
    /// The method's own policies, if set.
    pub fn retrying(&self) -> Option<&Retrying> {
        self.retrying.as_ref()
    }
}
