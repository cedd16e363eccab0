//! gRFC A6 hedging: when to send the next copy of a call, in one pure state
//! machine.
//!
//! Retries fix errors; they do nothing for a call that is merely slow. A
//! hedged call sends a second copy of an idempotent request after a delay,
//! and takes whichever answer comes first, so one slow server (a GC pause,
//! a cold cache) no longer sets the call's latency. Several attempts are in
//! flight at once, so the question "what now?" has more answers than after
//! a retry; they are all given here, by [`Hedge`], without I/O: the driver
//! asks [`Hedge::next`] what to do, starts attempts or waits as told, and
//! reports each attempt's [`Outcome`] to [`Hedge::on_outcome`].
//!
//! The rules (gRFC A6), in the order they are applied:
//!
//! | # | rule | result ([`Reason`]) |
//! |---|---|---|
//! | 1 | an attempt succeeded, or its response was committed (a stream's first message) | commit it, cancel the others; the token bucket gets `token_ratio` back (`done`) |
//! | 2 | an attempt timed out at the call's deadline | fail with DEADLINE_EXCEEDED, cancel the others (`deadline`) |
//! | 3 | an attempt failed with a status not in `nonFatalStatusCodes` (a timeout of its own counts as UNAVAILABLE) | commit it, cancel the others (`not_retryable`) |
//! | 4 | a non-fatal failure | takes a token; pushback negative or garbled stops hedging (`pushback_stop`), positive sets the next hedge that long after now (at most 10 minutes, 10 minutes), none sends it at once |
//! | 5 | the first attempt | at once |
//! | 6 | `maxAttempts` started | no more hedges (`exhausted` once all failed) |
//! | 7 | a hedge would start at or past the deadline (the first attempt always starts, as an unhedged call's does) | no more hedges (`deadline`) |
//! | 8 | the token bucket is at or below half | no more hedges (`throttled`) |
//! | 9 | otherwise | a hedge at the hedge time, the next one `hedgingDelay` later (`hedge`) |
//!
//! When no attempt is in flight and no hedge will start, the call ends with
//! the last failure. Each hedge carries `grpc-previous-rpc-attempts`.

use std::time::Duration;

use tonic::Code;

use super::decide::{AttemptEvent, CallState, Next, Outcome, Reason};
use super::hedging_policy::HedgingPolicy;
use super::throttle::{RetryThrottle, record};
use crate::policy::{DEFAULT_MAX_SERVER_RETRY_DELAY, Failure, Pushback};

/// What the driver does next ([`Hedge::next`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Step {
    /// Start attempt number `attempt` (0 for the first, also its
    /// `grpc-previous-rpc-attempts`) now, with this time limit.
    Start {
        /// The attempt's number.
        attempt: u32,
        /// Its `grpc-timeout`: the time left before the deadline.
        limit: Option<Duration>,
    },
    /// Wait for an attempt to end, or until this time (on the clock the
    /// call's times are read from) if one is given, then ask again.
    Wait(Option<Duration>),
    /// Nothing is in flight and no hedge will start: end the call with the
    /// last failure.
    Finish(Reason),
}

/// The call ends with attempt `attempt` ([`Hedge::on_outcome`]): cancel
/// every other one.
#[derive(Debug)]
pub(super) struct Commit {
    /// The attempt that won.
    pub attempt: u32,
    /// Deliver its result, or fail with this status instead (a timeout).
    pub next: Next,
    /// Why.
    pub reason: Reason,
}

/// The hedging state of one call; see the module docs for the rules.
#[derive(Debug)]
pub(super) struct Hedge {
    policy: HedgingPolicy,
    call: CallState,
    in_flight: u32,
    /// When the next hedge may start; `None` once no hedge will.
    next_at: Option<Duration>,
    /// Why hedging stopped, if it did.
    stopped: Option<Reason>,
}

impl Hedge {
    /// A hedged call: its first attempt starts at `now`. `call` holds the
    /// path and the deadline.
    pub(super) fn new(policy: HedgingPolicy, call: CallState, now: Duration) -> Self {
        Hedge {
            policy,
            call,
            in_flight: 0,
            next_at: Some(now),
            stopped: None,
        }
    }

    /// Attempts started so far.
    #[cfg(test)]
    pub(super) fn started(&self) -> u32 {
        self.call.attempts()
    }

    /// Attempts in flight.
    pub(super) fn in_flight(&self) -> u32 {
        self.in_flight
    }

    /// What to do at `now` (rules 5 to 9).
    pub(super) fn next(&mut self, now: Duration, throttle: Option<&RetryThrottle>) -> Step {
        if let (Some(at), None) = (self.next_at, self.stopped) {
            let started = self.call.attempts();
            let stop = if started >= self.policy.max_attempts() {
                Some(Reason::Exhausted)
            } else if started > 0 && self.call.deadline().is_some_and(|d| at.max(now) >= d) {
                Some(Reason::Deadline)
            } else if at > now {
                return Step::Wait(Some(at));
            } else if started > 0 && throttle.is_some_and(|t| !t.allows_retry()) {
                Some(Reason::Throttled)
            } else {
                None
            };
            match stop {
                Some(reason) => self.stop(reason),
                None => {
                    let limit = self.call.begin_attempt(now);
                    self.in_flight += 1;
                    self.next_at = now.checked_add(self.policy.delay());
                    if started > 0 {
                        self.event(started, None, Reason::Hedge, None);
                    }
                    return Step::Start {
                        attempt: started,
                        limit,
                    };
                }
            }
        }
        if self.in_flight > 0 {
            return Step::Wait(None);
        }
        let reason = self.stopped.unwrap_or(Reason::Exhausted);
        Step::Finish(reason)
    }

    /// Attempt `attempt` ended with `outcome` at `now` (rules 1 to 4):
    /// `Some` commits the call.
    pub(super) fn on_outcome(
        &mut self,
        attempt: u32,
        outcome: Outcome<'_>,
        now: Duration,
        throttle: Option<&RetryThrottle>,
    ) -> Option<Commit> {
        self.in_flight = self.in_flight.saturating_sub(1);
        let failure = match outcome {
            Outcome::Done => {
                record(throttle, None, false);
                return Some(self.commit(attempt, Code::Ok, Next::Deliver, Reason::Done));
            }
            // The one classification of this failure.
            Outcome::Failed { status, pushback } => {
                Some(Failure::new(status).with_pushback(pushback))
            }
            Outcome::TimedOut => None,
        };
        let timeout;
        let (failure, on_stop) = match failure {
            Some(failure) if !self.call.channel_timeout(&failure) => (failure, None),
            _ if self.call.deadline().is_some_and(|d| now >= d) => {
                let status = self.call.deadline_status();
                let code = status.code();
                return Some(self.commit(attempt, code, Next::Fail(status), Reason::Deadline));
            }
            _ => {
                let (judged, failed) = self.call.timeout_statuses();
                timeout = judged;
                (Failure::new(&timeout), Some(failed))
            }
        };
        let code = failure.code();
        let non_fatal = self.policy.is_non_fatal(code);
        record(throttle, Some(&failure), non_fatal);
        if !non_fatal {
            let next = on_stop.map_or(Next::Deliver, Next::Fail);
            return Some(self.commit(attempt, code, next, Reason::NotRetryable));
        }
        match failure.pushback() {
            Some(Pushback::Stop) => self.stop(Reason::PushbackStop),
            Some(Pushback::After(d)) => {
                self.next_at = now.checked_add(d.min(DEFAULT_MAX_SERVER_RETRY_DELAY))
            }
            None => self.next_at = self.next_at.map(|at| at.min(now)),
        }
        let reason = self.stopped.unwrap_or(Reason::Hedge);
        self.event(attempt, Some(code), reason, None);
        None
    }

    fn stop(&mut self, reason: Reason) {
        self.next_at = None;
        self.stopped.get_or_insert(reason);
    }

    fn commit(&mut self, attempt: u32, code: Code, next: Next, reason: Reason) -> Commit {
        self.next_at = None;
        let final_code = match &next {
            Next::Fail(s) => s.code(),
            _ => code,
        };
        self.event(attempt, Some(code), reason, Some(final_code));
        Commit {
            attempt,
            next,
            reason,
        }
    }

    /// The event of attempt `attempt` (numbered from 0 here, from 1 in
    /// events, as the retry loop's).
    fn event(&self, attempt: u32, code: Option<Code>, reason: Reason, end: Option<Code>) {
        let attempt = attempt + 1;
        AttemptEvent {
            path: self.call.path(),
            attempt,
            code,
            wait: None,
            reason,
            won: end.map(|_| attempt),
            end,
        }
        .emit();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::uri::PathAndQuery;
    use tonic::Status;

    const MS: Duration = Duration::from_millis(1);

    fn hedge(max: u32, delay_ms: u64, deadline_ms: Option<u64>) -> Hedge {
        let policy = HedgingPolicy::new(max, MS * delay_ms as u32)
            .unwrap()
            .non_fatal([Code::Unavailable]);
        let mut call = CallState::new(PathAndQuery::from_static("/s.S/M"), true);
        if let Some(d) = deadline_ms {
            call = call.with_deadline(Duration::ZERO, MS * d as u32);
        }
        Hedge::new(policy, call, Duration::ZERO)
    }

    fn at(ms: u64) -> Duration {
        MS * ms as u32
    }

    fn start(h: &mut Hedge, now: u64) -> u32 {
        match h.next(at(now), None) {
            Step::Start { attempt, .. } => attempt,
            other => panic!("expected a start at {now} ms, got {other:?}"),
        }
    }

    fn failed(code: Code, pushback: Option<Pushback>) -> (Status, Option<Pushback>) {
        (Status::new(code, "x"), pushback)
    }

    fn outcome(f: &(Status, Option<Pushback>)) -> Outcome<'_> {
        Outcome::Failed {
            status: &f.0,
            pushback: f.1,
        }
    }

    #[test]
    fn first_at_once_then_every_delay_up_to_max() {
        let mut h = hedge(3, 10, None);
        assert_eq!(start(&mut h, 0), 0);
        assert_eq!(h.next(at(0), None), Step::Wait(Some(at(10))));
        assert_eq!(h.next(at(9), None), Step::Wait(Some(at(10))));
        assert_eq!(start(&mut h, 10), 1);
        assert_eq!(start(&mut h, 20), 2);
        assert_eq!((h.started(), h.in_flight()), (3, 3));
        assert_eq!(h.next(at(30), None), Step::Wait(None), "max reached");
    }

    #[test]
    fn zero_delay_starts_all_at_once() {
        let mut h = hedge(9, 0, None);
        for k in 0..5 {
            assert_eq!(start(&mut h, 0), k);
        }
        assert_eq!(h.next(at(0), None), Step::Wait(None));
    }

    #[test]
    fn first_ok_commits_and_returns_tokens() {
        let t = RetryThrottle::new(10, 0.5).unwrap();
        t.on_failure();
        let mut h = hedge(3, 10, None);
        start(&mut h, 0);
        start(&mut h, 10);
        let c = h.on_outcome(1, Outcome::Done, at(12), Some(&t)).unwrap();
        assert_eq!((c.attempt, c.reason), (1, Reason::Done));
        assert!(matches!(c.next, Next::Deliver));
        assert_eq!(t.tokens(), 9.5);
        assert_eq!(h.in_flight(), 1, "the loser, for the driver to cancel");
    }

    #[test]
    fn fatal_status_commits() {
        let mut h = hedge(3, 10, None);
        start(&mut h, 0);
        start(&mut h, 10);
        let f = failed(Code::Internal, None);
        let c = h.on_outcome(0, outcome(&f), at(11), None).unwrap();
        assert_eq!((c.attempt, c.reason), (0, Reason::NotRetryable));
        assert!(matches!(c.next, Next::Deliver));
    }

    #[test]
    fn non_fatal_sends_the_next_hedge_at_once_and_costs_a_token() {
        let t = RetryThrottle::new(10, 0.1).unwrap();
        let mut h = hedge(3, 10, None);
        start(&mut h, 0);
        let f = failed(Code::Unavailable, None);
        assert!(h.on_outcome(0, outcome(&f), at(3), Some(&t)).is_none());
        assert_eq!(t.tokens(), 9.0);
        assert_eq!(start(&mut h, 3), 1, "not at 10 ms");
        assert_eq!(h.next(at(3), None), Step::Wait(Some(at(13))));
    }

    #[test]
    fn all_non_fatal_finish_with_the_last_failure() {
        let mut h = hedge(2, 10, None);
        start(&mut h, 0);
        start(&mut h, 10);
        let f = failed(Code::Unavailable, None);
        assert!(h.on_outcome(1, outcome(&f), at(11), None).is_none());
        assert_eq!(h.next(at(11), None), Step::Wait(None));
        assert!(h.on_outcome(0, outcome(&f), at(12), None).is_none());
        assert_eq!(h.next(at(12), None), Step::Finish(Reason::Exhausted));
    }

    #[test]
    fn negative_pushback_stops_hedging() {
        let mut h = hedge(5, 10, None);
        start(&mut h, 0);
        start(&mut h, 10);
        let f = failed(Code::Unavailable, Some(Pushback::Stop));
        assert!(h.on_outcome(0, outcome(&f), at(11), None).is_none());
        assert_eq!(h.next(at(100), None), Step::Wait(None), "attempt 1 goes on");
        assert!(h.on_outcome(1, outcome(&f), at(120), None).is_none());
        assert_eq!(h.next(at(120), None), Step::Finish(Reason::PushbackStop));
    }

    #[test]
    fn positive_pushback_delays_the_next_hedge() {
        let mut h = hedge(5, 10, None);
        start(&mut h, 0);
        let f = failed(Code::Unavailable, Some(Pushback::After(at(50))));
        assert!(h.on_outcome(0, outcome(&f), at(4), None).is_none());
        assert_eq!(h.next(at(10), None), Step::Wait(Some(at(54))));
        assert_eq!(start(&mut h, 54), 1);
        assert_eq!(h.next(at(54), None), Step::Wait(Some(at(64))));
    }

    #[test]
    fn throttle_at_half_stops_hedges_not_the_first_attempt() {
        let t = RetryThrottle::new(4, 0.1).unwrap();
        t.on_failure();
        t.on_failure();
        let mut h = hedge(3, 10, None);
        assert!(matches!(
            h.next(at(0), Some(&t)),
            Step::Start { attempt: 0, .. }
        ));
        assert_eq!(h.next(at(10), Some(&t)), Step::Wait(None));
        let f = failed(Code::Unavailable, None);
        assert!(h.on_outcome(0, outcome(&f), at(20), Some(&t)).is_none());
        assert_eq!(h.next(at(20), Some(&t)), Step::Finish(Reason::Throttled));
    }

    #[test]
    fn no_hedge_at_or_past_the_deadline() {
        let mut h = hedge(5, 10, Some(20));
        match h.next(at(0), None) {
            Step::Start { attempt: 0, limit } => assert_eq!(limit, Some(at(20))),
            other => panic!("{other:?}"),
        }
        match h.next(at(10), None) {
            Step::Start { attempt: 1, limit } => assert_eq!(limit, Some(at(10))),
            other => panic!("{other:?}"),
        }
        assert_eq!(
            h.next(at(15), None),
            Step::Wait(None),
            "20 ms is the deadline"
        );
        let c = h.on_outcome(0, Outcome::TimedOut, at(20), None).unwrap();
        assert_eq!(c.reason, Reason::Deadline);
        assert!(matches!(c.next, Next::Fail(ref s) if s.code() == Code::DeadlineExceeded));
    }

    #[test]
    fn the_first_attempt_starts_even_past_the_deadline() {
        let mut h = hedge(3, 10, Some(0));
        assert!(
            matches!(h.next(at(5), None), Step::Start { attempt: 0, limit: Some(l) } if l.is_zero())
        );
        assert_eq!(h.next(at(10), None), Step::Wait(None));
    }

    #[test]
    fn a_timeout_of_its_own_is_unavailable() {
        let mut h = hedge(3, 10, None);
        start(&mut h, 0);
        assert!(h.on_outcome(0, Outcome::TimedOut, at(5), None).is_none());
        assert_eq!(start(&mut h, 5), 1);
        let strict = HedgingPolicy::new(2, at(10)).unwrap();
        let call = CallState::new(PathAndQuery::from_static("/s.S/M"), true);
        let mut h = Hedge::new(strict, call, Duration::ZERO);
        start(&mut h, 0);
        let c = h.on_outcome(0, Outcome::TimedOut, at(5), None).unwrap();
        assert!(matches!(c.next, Next::Fail(ref s) if s.code() == Code::DeadlineExceeded));
    }

    #[test]
    fn policy_rules() {
        assert_eq!(
            HedgingPolicy::new(0, MS).unwrap_err().field(),
            "max_attempts"
        );
        assert_eq!(HedgingPolicy::new(2, MS).unwrap().max_attempts(), 2);
        assert_eq!(HedgingPolicy::new(u32::MAX, MS).unwrap().max_attempts(), 5);
        let huge = HedgingPolicy::new(2, Duration::MAX).unwrap();
        let call = CallState::new(PathAndQuery::from_static("/s.S/M"), true);
        let mut h = Hedge::new(huge, call, at(1));
        start(&mut h, 1);
        assert_eq!(
            h.next(at(2), None),
            Step::Wait(None),
            "a delay past the clock: no hedge"
        );
    }
}
