//! Per-method settings: whether a method may be replayed, how its
//! responses are read, its deadline, policies and hedging.
//!
//! A retry is only as safe as the method it repeats: a read can be sent
//! twice, a write may not. These settings are the layer's knowledge of each
//! method, kept apart from the machinery that acts on them.

use std::time::Duration;

use super::hedging_policy::HedgingPolicy;
use crate::retrying::Retrying;

/// How the layer finds a response's gRPC status before committing to it
/// (see the [module docs](super)).
///
/// # The commit rule
///
/// A response is *committed* (handed to the caller, never retried) once
/// the caller could have seen part of it. gRFC A6 commits a call when its
/// response headers arrive. This layer commits later, at the **first
/// response message**: a tonic (or grpc-go, grpc-java) server sends its
/// headers before a streaming handler has produced anything, so a stream
/// that fails before its first message has sent headers but delivered
/// nothing, and is still safe to retry. Everything before the first
/// message (trailers-only statuses, HTTP errors, resets, a body error) is
/// judged by the policy, whatever the kind.
///
/// [`Auto`](Self::Auto), the default, needs no declaration per method and
/// never waits for a second message: when the first message is whole, the
/// layer looks at what the connection has *already* received behind it.
/// Trailers there (how servers write a unary response: message and
/// trailers in one flush) mean a unary call, judged by its status; nothing
/// there yet, or more data, commits the response at once, so a stream's
/// first message reaches the caller as soon as it arrives. The cost: a
/// unary response whose failing trailers arrive separately from its
/// message is committed, and delivered with its status, not retried; A6
/// would not retry it either. Declare [`Unary`](Self::Unary) for a method
/// whose failures come after a message and must be retried.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum ResponseKind {
    /// Decide per response, never waiting past the first message (the
    /// commit rule above).
    #[default]
    Auto,
    /// One response message: buffer it and wait for the trailers (up to
    /// the response cap), so a failure after the message is retried too.
    /// A server stream declared `Unary` waits for its second message.
    Unary,
    /// A server stream: committed at its first byte of data.
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
    pub fn with_retrying(mut self, retrying: impl Into<Retrying>) -> Self {
        self.retrying = Some(retrying.into());
        self
    }
    /// Hedge the method instead of retrying it (gRFC A6; see the
    /// [module docs](super#hedging)). Hedging runs a call more than once on
    /// purpose, so the method becomes idempotent (and retried, if it was
    /// [`passthrough`](Self::passthrough)), as a service config's
    /// `hedgingPolicy` makes it.
    pub fn with_hedging(self, policy: HedgingPolicy) -> Self {
        self.hedged(policy)
    }
    pub(crate) fn hedged(mut self, policy: HedgingPolicy) -> Self {
        self.idempotent = true;
        self.retry = true;
        self.hedging = Some(policy);
        self
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
