//! Everything the retry layer decides after an attempt, in one pure function.
//!
//! "Why was this call not retried?" has many possible answers: the method
//! may be unsafe to replay, the policy may not accept the status or may be
//! out of budget, the server may have said stop, the token bucket may be
//! low, or the wait would end past the deadline. They are all answered
//! here, by [`decide`], in a fixed order, with no I/O: the driver sends an
//! attempt, describes what came back as an [`Outcome`], and does what the
//! [`Decision`] says. One event per attempt records the decision
//! actually taken, with its [`Reason`]: a `grpc attempt` debug event, or,
//! for the attempt that spends the budget, the give-up warning.
//!
//! The rules, in the order they are applied:
//!
//! | # | rule | result ([`Reason`]) |
//! |---|---|---|
//! | 1 | the attempt succeeded, or its response was committed to the caller | deliver it; the token bucket gets `token_ratio` back (`done`) |
//! | 2 | the call's overall deadline expired during the attempt | fail with DEADLINE_EXCEEDED (`deadline`) |
//! | 3 | the attempt's own timeout fired (time is left overall) | judged below as UNAVAILABLE; if the call stops here, it fails with DEADLINE_EXCEEDED |
//! | 4 | a failure the policy would retry, or one with a pushback | takes a token from the bucket (gRFC A6); this alone decides nothing |
//! | 5 | `grpc-retry-pushback-ms` negative or garbled | deliver (`pushback_stop`) |
//! | 6 | a non-idempotent method, unless the failure shows the work did not start (below) | deliver (`not_replayable`) |
//! | 7 | the first policy whose classifier accepts the status decides | deliver if none (`not_retryable`) or its budget is spent (`exhausted`: the attempt's event is the give-up warning) |
//! | 8 | the token bucket is at or below half | deliver (`throttled`) |
//! | 9 | the wait: the pushback exactly (capped by the policy's `max_server_retry_delay`, 10 min by default, as RetryInfo is), then the policy's backoff restarts (A6); else the policy's wait, with RetryInfo as its floor | |
//! | 10 | the retry would start at or past the deadline | deliver (`deadline`) |
//! | 11 | otherwise | retry after the wait (`pushback`, `retry_info` or `policy`) |
//!
//! **Non-idempotent methods** (rule 6) are replayed only after a failure
//! that shows the server did not start the work: the request never reached
//! it ([`FailureKind::Unprocessed`]: a refused connection, a stream refused
//! or cut before it was written, GOAWAY `NO_ERROR`), or the server rejected
//! it at admission and asked for the retry (a `grpc-retry-pushback-ms` ≥ 0
//! on any status, or RESOURCE_EXHAUSTED with a `google.rpc.RetryInfo`).
//! Every other failure (UNAVAILABLE from the server, a reset after the
//! request was written, an attempt timeout) may have run the method, and is
//! delivered. The policy still decides whether the replay happens (rule 7).

use std::time::Duration;

use http::uri::PathAndQuery;
use tonic::{Code, Status};

use super::throttle::{RetryThrottle, record};
use crate::policy::{Failure, FailureKind, GiveUpReason, RetryDecision, RetryReason, RetryState};
use crate::retrying::Retrying;

use crate::policy::Pushback;

/// What came back from one attempt, as far as the decision is concerned.
#[derive(Debug, Clone, Copy)]
pub(super) enum Outcome<'a> {
    /// OK, or a response committed to the caller (a stream past its first
    /// message, a response over the buffer cap, a body without trailers).
    Done,
    /// A failed attempt: the server's status, or a transport failure as
    /// tonic reports it (its source chain tells [`FailureKind`]).
    Failed {
        /// The status.
        status: &'a Status,
        /// The server's `grpc-retry-pushback-ms`, if any.
        pushback: Option<Pushback>,
    },
    /// The layer's timer for this attempt fired.
    TimedOut,
}

/// What the driver does next.
#[derive(Debug)]
pub(super) enum Next {
    /// Hand the attempt's own result (response or error) to the caller.
    Deliver,
    /// Fail the call with this status instead (a timeout).
    Fail(Status),
    /// Wait this long, then send another attempt.
    Retry(Duration),
}

/// Why the layer did what it did; the `reason` field of its events.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub(crate) enum Reason {
    /// The attempt's response ends the call.
    Done,
    /// Retried after the policy's backoff.
    Policy,
    /// Retried after the server's `RetryInfo` delay (the policy's floor).
    RetryInfo,
    /// Retried after exactly the server's `grpc-retry-pushback-ms`.
    Pushback,
    /// The policy's budget is spent.
    Exhausted,
    /// No policy accepts the status.
    NotRetryable,
    /// The method is not idempotent and the server may have run it.
    NotReplayable,
    /// The token bucket refused the retry.
    Throttled,
    /// The deadline expired, or the retry would start past it.
    Deadline,
    /// The server's pushback says not to retry.
    PushbackStop,
    /// A hedge was sent, or a hedged attempt failed with a non-fatal
    /// status while the others go on (the hedging rules).
    Hedge,
}

impl Reason {
    /// The name used in events.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Reason::Done => "done",
            Reason::Policy => "policy",
            Reason::RetryInfo => "retry_info",
            Reason::Pushback => "pushback",
            Reason::Exhausted => "exhausted",
            Reason::NotRetryable => "not_retryable",
            Reason::NotReplayable => "not_replayable",
            Reason::Throttled => "throttled",
            Reason::Deadline => "deadline",
            Reason::PushbackStop => "pushback_stop",
            Reason::Hedge => "hedge",
        }
    }
}

/// The result of [`decide`].
#[derive(Debug)]
pub(super) struct Decision {
    /// What to do.
    pub next: Next,
    /// Why.
    pub reason: Reason,
}

/// The configuration a decision reads: the policies and the token bucket.
#[derive(Debug, Clone, Copy)]
pub(super) struct Rules<'a> {
    /// The policies (and the jitter source) for this method.
    pub retrying: &'a Retrying,
    /// The shared token bucket, if throttling is on.
    pub throttle: Option<&'a RetryThrottle>,
}

/// The time limits of the attempt in flight.
#[derive(Debug, Clone, Copy, Default)]
struct AttemptLimit {
    /// `min(per-attempt timeout, time left overall)`.
    limit: Option<Duration>,
    /// Whether that limit is the attempt's own (time is left overall).
    own: bool,
}

/// What the layer knows of one call across its attempts.
#[derive(Debug)]
pub(super) struct CallState {
    path: PathAndQuery,
    idempotent: bool,
    /// Attempts started so far.
    attempts: u32,
    /// When the deadline was set (for its message) and when it expires,
    /// on the [`Retrying`]'s clock.
    start: Duration,
    deadline: Option<Duration>,
    per_attempt: Option<Duration>,
    limit: AttemptLimit,
    /// The policies' budgets, made on the first failure.
    retry: Option<RetryState>,
    /// The server, for the give-up event (the request's authority).
    target: Option<String>,
    /// The call's own cap on attempts ([`CallOptions`](super::CallOptions)).
    max_attempts: Option<u32>,
}

impl CallState {
    /// A call to `path` (`/package.Service/Method`), with no time limits.
    pub(super) fn new(path: PathAndQuery, idempotent: bool) -> Self {
        CallState {
            path,
            idempotent,
            attempts: 0,
            start: Duration::ZERO,
            deadline: None,
            per_attempt: None,
            limit: AttemptLimit::default(),
            retry: None,
            target: None,
            max_attempts: None,
        }
    }

    /// At most `n` attempts, whatever the policy allows.
    pub(super) fn with_max_attempts(mut self, n: Option<u32>) -> Self {
        self.max_attempts = n;
        self
    }

    /// The server the call goes to (`host:port`), named by the give-up event.
    pub(super) fn with_target(mut self, target: Option<String>) -> Self {
        self.target = target;
        self
    }

    /// An overall deadline `timeout` after `now`. A deadline beyond the
    /// clock's range is no deadline (it can never expire).
    pub(super) fn with_deadline(mut self, now: Duration, timeout: Duration) -> Self {
        self.start = now;
        self.deadline = now.checked_add(timeout);
        self
    }

    /// A timeout for each attempt.
    pub(super) fn with_attempt_timeout(mut self, timeout: Option<Duration>) -> Self {
        self.per_attempt = timeout;
        self
    }

    /// Start an attempt at `now`; returns its time limit (its
    /// `grpc-timeout`): the per-attempt timeout or the time left overall,
    /// whichever is shorter.
    pub(super) fn begin_attempt(&mut self, now: Duration) -> Option<Duration> {
        self.attempts += 1;
        let left = self.deadline.map(|d| d.saturating_sub(now));
        let limit = match (left, self.per_attempt) {
            (Some(l), Some(p)) => Some(l.min(p)),
            (l, p) => l.or(p),
        };
        let own = self.per_attempt.is_some_and(|p| left.is_none_or(|l| p < l));
        self.limit = AttemptLimit { limit, own };
        limit
    }

    /// The number of attempts started; the one in flight is `attempts() - 1`
    /// (`grpc-previous-rpc-attempts`).
    pub(super) fn attempts(&self) -> u32 {
        self.attempts
    }

    /// The overall deadline, on the [`Retrying`]'s clock.
    pub(super) fn deadline(&self) -> Option<Duration> {
        self.deadline
    }

    /// Whether `failure` is the channel's own timeout for the limit the
    /// layer set (its `grpc-timeout`): the same limit as the layer's timer,
    /// so it counts as [`Outcome::TimedOut`].
    pub(crate) fn channel_timeout(&self, failure: &Failure<'_>) -> bool {
        (self.deadline.is_some() || self.per_attempt.is_some())
            && failure.kind() == FailureKind::Deadline
    }

    /// The status of a call that ends because its overall deadline passed.
    pub(crate) fn deadline_status(&self) -> Status {
        let ms = self
            .deadline
            .map_or(0, |d| d.saturating_sub(self.start).as_millis());
        Status::deadline_exceeded(format!(
            "deadline of {ms} ms exceeded after {} attempt(s)",
            self.attempts
        ))
    }

    /// An attempt that timed out while time is left overall: judged as
    /// UNAVAILABLE (the first status), and failed as DEADLINE_EXCEEDED
    /// (the second) if the call stops there.
    pub(crate) fn timeout_statuses(&self) -> (Status, Status) {
        let limit = self.limit.limit.unwrap_or_default().as_millis();
        let msg = format!("attempt timed out after {limit} ms");
        (
            Status::unavailable(msg.clone()),
            Status::deadline_exceeded(msg),
        )
    }

    /// Whether the attempt in flight was limited by its own timeout rather
    /// than by the overall deadline.
    pub(crate) fn limit_is_own(&self) -> bool {
        self.limit.own
    }

    /// Transparent retries granted so far (gRFC A6: unsent requests re-sent).
    pub(crate) fn transparent_retries(&self) -> u32 {
        self.retry
            .as_ref()
            .map_or(0, RetryState::transparent_retries)
    }

    /// The call's path.
    pub(super) fn path(&self) -> &str {
        self.path.path()
    }

    /// The policies' state, once a failure created it.
    #[cfg(test)]
    pub(super) fn retry_state(&self) -> Option<&RetryState> {
        self.retry.as_ref()
    }
}

/// A failure that may be replayed even for a non-idempotent method (see
/// the module docs): the request never reached the server, or the server
/// rejected it at admission and asked for the retry.
fn work_not_started(failure: &Failure<'_>) -> bool {
    failure.kind() == FailureKind::Unprocessed
        || (failure.kind() == FailureKind::Server
            && (matches!(failure.pushback(), Some(Pushback::After(_)))
                || (failure.code() == Code::ResourceExhausted && failure.retry_info().is_some())))
}

/// Decide what follows the attempt started last, which ended with
/// `outcome` at `now` (see the module docs for the rules).
pub(super) fn decide(
    state: &mut CallState,
    outcome: Outcome<'_>,
    now: Duration,
    rules: Rules<'_>,
) -> Decision {
    let failure = match outcome {
        Outcome::Done => {
            record(rules.throttle, None, false);
            return state.log(Code::Ok, None, Next::Deliver, Reason::Done, rules);
        }
        // The one classification of this failure.
        Outcome::Failed { status, pushback } => Some(Failure::new(status).with_pushback(pushback)),
        Outcome::TimedOut => None,
    };
    let timeout;
    let (failure, on_stop) = match failure {
        // The channel enforces the grpc-timeout we set, too: whichever
        // timer fires first, it is the same limit.
        Some(failure) if !state.channel_timeout(&failure) => (failure, None),
        _ if !state.limit_is_own() => {
            let next = Next::Fail(state.deadline_status());
            return state.log(Code::DeadlineExceeded, None, next, Reason::Deadline, rules);
        }
        _ => {
            let (judged, failed) = state.timeout_statuses();
            timeout = judged;
            (Failure::new(&timeout), Some(failed))
        }
    };
    let pushback = failure.pushback();
    let code = failure.code();
    let stop = |state: &CallState, wait, reason| {
        let next = on_stop.map_or(Next::Deliver, Next::Fail);
        state.log(code, wait, next, reason, rules)
    };
    let retry = state
        .retry
        .get_or_insert_with(|| rules.retrying.new_state());
    let matched = retry.matching(&failure);
    record(rules.throttle, Some(&failure), matched.is_some());
    if pushback == Some(Pushback::Stop) {
        return stop(state, None, Reason::PushbackStop);
    }
    if !state.idempotent && !work_not_started(&failure) {
        return stop(state, None, Reason::NotReplayable);
    }
    let (delay, index, server_delay) = match rules.retrying.judge_failure(retry, &failure, matched)
    {
        RetryDecision::Retry {
            delay,
            reason:
                RetryReason::Policy {
                    index,
                    server_delay,
                },
        } => (delay, Some(index), server_delay),
        RetryDecision::Retry { delay, .. } => (delay, None, None),
        RetryDecision::GiveUp(GiveUpReason::NotRetryable) => {
            return stop(state, None, Reason::NotRetryable);
        }
        RetryDecision::GiveUp(_) => return stop(state, None, Reason::Exhausted),
    };
    if state.max_attempts.is_some_and(|m| state.attempts >= m) {
        return stop(state, None, Reason::Exhausted);
    }
    if rules.throttle.is_some_and(|t| !t.allows_retry()) {
        return stop(state, None, Reason::Throttled);
    }
    let (wait, reason) = match pushback {
        Some(Pushback::After(d)) => {
            // A server's pushback is capped like its RetryInfo: by the
            // policy's `max_server_retry_delay`.
            let cap = index.and_then(|i| rules.retrying.policies()[i].max_server_retry_delay());
            if let Some(i) = index {
                retry.restart_backoff(i);
            }
            (cap.map_or(d, |cap| d.min(cap)), Reason::Pushback)
        }
        _ if server_delay.is_some() => (delay, Reason::RetryInfo),
        _ => (delay, Reason::Policy),
    };
    // Never schedule an attempt that would start past the deadline (Armeria).
    if let Some(deadline) = state.deadline
        && now.checked_add(wait).is_none_or(|at| at >= deadline)
    {
        return stop(state, Some(wait), Reason::Deadline);
    }
    state.log(code, Some(wait), Next::Retry(wait), reason, rules)
}

impl CallState {
    /// Record the decision taken: one event per attempt, and the final
    /// status code on the call's span when the call ends.
    fn log(
        &self,
        code: Code,
        wait: Option<Duration>,
        next: Next,
        reason: Reason,
        rules: Rules<'_>,
    ) -> Decision {
        let end = match &next {
            Next::Retry(_) => None,
            Next::Fail(s) => Some(s.code()),
            Next::Deliver => Some(code),
        };
        let event = AttemptEvent {
            path: self.path(),
            attempt: self.attempts,
            code: Some(code),
            wait,
            reason,
            won: None,
            end,
        };
        if reason == Reason::Exhausted {
            let waited = self
                .retry
                .as_ref()
                .map_or(Duration::ZERO, RetryState::waited);
            event.give_up(
                self.target.as_deref(),
                waited,
                rules.retrying.give_up_message(),
            );
        } else {
            event.emit();
        }
        Decision { next, reason }
    }
}

/// The event of one attempt (retried or hedged): its number (from 1), its
/// status, the wait before the next one, its [`Reason`], and for a hedged
/// call the attempt that won; `end` is the call's final status, recorded
/// on its span.
pub(crate) struct AttemptEvent<'a> {
    pub(crate) path: &'a str,
    pub(crate) attempt: u32,
    pub(crate) code: Option<Code>,
    pub(crate) wait: Option<Duration>,
    pub(crate) reason: Reason,
    pub(crate) won: Option<u32>,
    pub(crate) end: Option<Code>,
}

impl AttemptEvent<'_> {
    /// The `grpc attempt` debug event.
    pub(crate) fn emit(&self) {
        if tracing::enabled!(tracing::Level::DEBUG) {
            let (service, method) = split_path(self.path);
            tracing::debug!(
                rpc.service = service,
                rpc.method = method,
                attempt = self.attempt,
                rpc.grpc.status_code = self.code.map(|c| c as i32),
                wait_ms = self.wait.map(millis),
                reason = self.reason.as_str(),
                won = self.won,
                "grpc attempt"
            );
            self.record_end();
        }
    }

    /// The give-up warning, in place of the last attempt's debug event: it
    /// names the call itself (the span is at debug level, so a warning
    /// alone must say which call gave up).
    fn give_up(&self, target: Option<&str>, waited: Duration, message: &'static str) {
        if tracing::enabled!(tracing::Level::WARN) {
            let (service, method) = split_path(self.path);
            tracing::warn!(
                rpc.service = service,
                rpc.method = method,
                server.address = target,
                attempt = self.attempt,
                attempts = self.attempt,
                rpc.grpc.status_code = self.code.map(|c| c as i32),
                waited_ms = millis(waited),
                reason = self.reason.as_str(),
                "{message}"
            );
            self.record_end();
        }
    }

    fn record_end(&self) {
        if let Some(code) = self.end {
            tracing::Span::current().record("rpc.grpc.status_code", code as i32);
        }
    }
}

/// Whole milliseconds, saturating, for log fields.
fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// `/package.Service/Method` → (`package.Service`, `Method`).
pub(crate) fn split_path(path: &str) -> (&str, &str) {
    path.trim_start_matches('/')
        .split_once('/')
        .unwrap_or((path, ""))
}

#[cfg(test)]
mod tests;
