//! The decision function, rule by rule (the table in the module docs),
//! with no server: each test states a call, an attempt's outcome and the
//! time, and checks the decision.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use http::HeaderMap;
use http::uri::PathAndQuery;
use tonic::{Code, Status};
use tonic_types::{ErrorDetails, StatusExt};

use super::{CallState, Decision, Next, Outcome, Reason, Rules, decide};
use crate::headers::GRPC_RETRY_PUSHBACK_MS;
use crate::layer::RetryThrottle;
use crate::policy::{DEFAULT_MAX_SERVER_RETRY_DELAY, FnClassifier, Pushback, RetryPolicy};
use crate::retrying::Retrying;

const MS: Duration = Duration::from_millis(1);

/// A policy without jitter: waits 50, 200, 800 ms… (PySpark's numbers,
/// which the rules below were first written against).
fn fixed() -> Retrying {
    let policy = RetryPolicy::builder()
        .max_retries(Some(15))
        .initial_backoff(50 * MS)
        .max_backoff(Some(Duration::from_secs(60)))
        .backoff_multiplier(4.0)
        .proportional_jitter(0.0)
        .build()
        .unwrap();
    Retrying::new(vec![policy]).with_seed(1)
}

fn call(idempotent: bool) -> CallState {
    CallState::new("/pkg.Svc/Method".parse().unwrap(), idempotent)
}

fn unavailable() -> Status {
    Status::unavailable("restarting")
}

/// A connection refused: the request never left (`FailureKind::Unprocessed`).
fn refused() -> Status {
    let io = std::io::Error::from(std::io::ErrorKind::ConnectionRefused);
    Status::from_error(Box::new(tonic::ConnectError(Box::new(io))))
}

/// A reset after the request was written (`FailureKind::MaybeProcessed`).
fn reset() -> Status {
    Status::from_error(Box::new(std::io::Error::from(
        std::io::ErrorKind::ConnectionReset,
    )))
}

fn with_retry_info(code: Code, delay: Duration) -> Status {
    Status::with_error_details(code, "later", ErrorDetails::with_retry_info(Some(delay)))
}

/// One attempt of `state` failing with `status` at `now`.
fn fail(
    state: &mut CallState,
    status: &Status,
    pushback: Option<Pushback>,
    now: Duration,
    rules: Rules<'_>,
) -> Decision {
    state.begin_attempt(now);
    decide(state, Outcome::Failed { status, pushback }, now, rules)
}

fn rules(retrying: &Retrying) -> Rules<'_> {
    Rules {
        retrying,
        throttle: None,
    }
}

fn retry_after(d: &Decision) -> Option<Duration> {
    match d.next {
        Next::Retry(w) => Some(w),
        _ => None,
    }
}

fn failed_with(d: &Decision) -> Option<(Code, String)> {
    match &d.next {
        Next::Fail(s) => Some((s.code(), s.message().to_owned())),
        _ => None,
    }
}

/// Rule 1: a success is delivered and refills the bucket.
#[test]
fn rule_1_success_is_delivered_and_refills_the_bucket() {
    let r = fixed();
    let t = RetryThrottle::new(10, 0.5).unwrap();
    t.on_failure();
    let mut s = call(true);
    s.begin_attempt(Duration::ZERO);
    let rules = Rules {
        retrying: &r,
        throttle: Some(&t),
    };
    let d = decide(&mut s, Outcome::Done, Duration::ZERO, rules);
    assert!(matches!(d.next, Next::Deliver));
    assert_eq!(d.reason, Reason::Done);
    assert_eq!(t.tokens(), 9.5);
    assert!(s.retry_state().is_none(), "no policy state on success");
}

/// Rule 2: the overall deadline expiring during an attempt fails the call
/// with DEADLINE_EXCEEDED, whether the layer's timer or the channel's fired.
#[test]
fn rule_2_overall_deadline_expired() {
    let r = fixed();
    // What tonic's channel reports when the grpc-timeout we set expires.
    let channel_deadline = Status::from_error(Box::new(tonic::TimeoutExpired(())));
    for outcome in [
        Outcome::TimedOut,
        Outcome::Failed {
            status: &channel_deadline,
            pushback: None,
        },
    ] {
        let mut s = call(true).with_deadline(Duration::from_secs(5), 350 * MS);
        assert_eq!(s.begin_attempt(Duration::from_secs(5)), Some(350 * MS));
        let d = decide(
            &mut s,
            outcome,
            Duration::from_secs(5) + 350 * MS,
            rules(&r),
        );
        assert_eq!(d.reason, Reason::Deadline);
        let (code, msg) = failed_with(&d).expect("fails");
        assert_eq!(code, Code::DeadlineExceeded);
        assert_eq!(msg, "deadline of 350 ms exceeded after 1 attempt(s)");
    }
    // A server's DEADLINE_EXCEEDED is its status like any other: not
    // retryable under PySpark's policy.
    let mut s = call(true).with_deadline(Duration::ZERO, 350 * MS);
    let server = Status::deadline_exceeded("the server gave up");
    let d = fail(&mut s, &server, None, Duration::ZERO, rules(&r));
    assert_eq!(d.reason, Reason::NotRetryable);
    assert!(matches!(d.next, Next::Deliver));
}

/// Rule 3: an attempt's own timeout is retried as UNAVAILABLE for an
/// idempotent method; a call that stops there fails with DEADLINE_EXCEEDED.
#[test]
fn rule_3_attempt_timeout() {
    let r = fixed();
    let mut s = call(true)
        .with_attempt_timeout(Some(100 * MS))
        .with_deadline(Duration::ZERO, Duration::from_secs(10));
    assert_eq!(s.begin_attempt(Duration::ZERO), Some(100 * MS));
    let d = decide(&mut s, Outcome::TimedOut, 100 * MS, rules(&r));
    assert_eq!((retry_after(&d), d.reason), (Some(50 * MS), Reason::Policy));
    // Non-idempotent: the attempt may have run; it is not replayed.
    let mut s = call(false).with_attempt_timeout(Some(100 * MS));
    s.begin_attempt(Duration::ZERO);
    let d = decide(&mut s, Outcome::TimedOut, 100 * MS, rules(&r));
    assert_eq!(d.reason, Reason::NotReplayable);
    let (code, msg) = failed_with(&d).expect("fails");
    assert_eq!(code, Code::DeadlineExceeded);
    assert_eq!(msg, "attempt timed out after 100 ms");
    // The per-attempt limit is capped by the time left overall, and then a
    // timeout is the whole call's.
    let mut s = call(true)
        .with_attempt_timeout(Some(100 * MS))
        .with_deadline(Duration::ZERO, 150 * MS);
    assert_eq!(s.begin_attempt(100 * MS), Some(50 * MS));
    let d = decide(&mut s, Outcome::TimedOut, 150 * MS, rules(&r));
    assert_eq!(d.reason, Reason::Deadline);
}

/// Rule 4: failures the policy would retry, or with a pushback, take a
/// token; others do not.
#[test]
fn rule_4_throttle_accounting() {
    let r = fixed();
    let t = RetryThrottle::new(100, 0.1).unwrap();
    let rules = Rules {
        retrying: &r,
        throttle: Some(&t),
    };
    let invalid = Status::invalid_argument("bad");
    fail(&mut call(true), &invalid, None, Duration::ZERO, rules);
    assert_eq!(t.tokens(), 100.0, "not retryable: no token");
    fail(&mut call(true), &unavailable(), None, Duration::ZERO, rules);
    assert_eq!(t.tokens(), 99.0);
    let pb = Some(Pushback::After(MS));
    fail(&mut call(true), &invalid, pb, Duration::ZERO, rules);
    assert_eq!(t.tokens(), 98.0, "a pushback counts");
}

/// Rule 5: a negative or garbled pushback stops, even for a retryable status.
#[test]
fn rule_5_pushback_stop() {
    let r = fixed();
    let d = fail(
        &mut call(true),
        &unavailable(),
        Some(Pushback::Stop),
        Duration::ZERO,
        rules(&r),
    );
    assert_eq!(d.reason, Reason::PushbackStop);
    assert!(matches!(d.next, Next::Deliver));
}

/// Rule 6: a non-idempotent method is replayed only when the work did not
/// start: unprocessed, a pushback ≥ 0, or RESOURCE_EXHAUSTED + RetryInfo.
#[test]
fn rule_6_non_idempotent_replay() {
    let r = fixed();
    let z = Duration::ZERO;
    let cases: [(Status, Option<Pushback>, Reason); 6] = [
        (unavailable(), None, Reason::NotReplayable),
        (reset(), None, Reason::NotReplayable),
        (
            with_retry_info(Code::Unavailable, 300 * MS),
            None,
            Reason::NotReplayable,
        ),
        (refused(), None, Reason::Policy),
        (
            unavailable(),
            Some(Pushback::After(20 * MS)),
            Reason::Pushback,
        ),
        (
            with_retry_info(Code::ResourceExhausted, 300 * MS),
            None,
            Reason::RetryInfo,
        ),
    ];
    for (status, pushback, want) in cases {
        let d = fail(&mut call(false), &status, pushback, z, rules(&r));
        assert_eq!(d.reason, want, "{status:?} {pushback:?}");
        // The same failures of an idempotent method are all retried.
        let d = fail(&mut call(true), &status, pushback, z, rules(&r));
        assert!(retry_after(&d).is_some(), "{status:?}");
    }
}

/// Rule 7: the first matching policy decides; none matching or a spent
/// budget delivers the status (the latter counted as exhausted).
#[test]
fn rule_7_policy_decides() {
    let r = fixed();
    let z = Duration::ZERO;
    let d = fail(&mut call(true), &Status::aborted("x"), None, z, rules(&r));
    assert_eq!(d.reason, Reason::NotRetryable);
    let one = RetryPolicy::builder()
        .max_retries(Some(1))
        .proportional_jitter(0.0)
        .build()
        .unwrap();
    let r = Retrying::new(vec![one]).with_seed(1);
    let mut s = call(true);
    let d = fail(&mut s, &unavailable(), None, z, rules(&r));
    assert_eq!(retry_after(&d), Some(100 * MS));
    let d = fail(&mut s, &unavailable(), None, z, rules(&r));
    assert_eq!(d.reason, Reason::Exhausted);
    assert!(matches!(d.next, Next::Deliver));
    assert_eq!(s.attempts(), 2);
}

/// Rule 8: a bucket at or below half refuses the retry.
#[test]
fn rule_8_throttled() {
    let r = fixed();
    let t = RetryThrottle::new(4, 0.1).unwrap();
    t.on_failure();
    let rules = Rules {
        retrying: &r,
        throttle: Some(&t),
    };
    // This failure takes the third token: 2 is not above 4 / 2.
    let d = fail(&mut call(true), &unavailable(), None, Duration::ZERO, rules);
    assert_eq!(d.reason, Reason::Throttled);
    assert!(matches!(d.next, Next::Deliver));
}

/// Rule 9: a pushback is the exact wait and restarts the backoff; RetryInfo
/// is the policy's floor.
#[test]
fn rule_9_waits() {
    let r = fixed();
    let z = Duration::ZERO;
    let mut s = call(true);
    let waits: Vec<_> = [None, Some(Pushback::After(1234 * MS)), None]
        .into_iter()
        .map(|pb| {
            let d = fail(&mut s, &unavailable(), pb, z, rules(&r));
            (retry_after(&d).unwrap(), d.reason)
        })
        .collect();
    assert_eq!(
        waits,
        [
            (50 * MS, Reason::Policy),
            (1234 * MS, Reason::Pushback),
            (50 * MS, Reason::Policy)
        ]
    );
    let status = with_retry_info(Code::Unavailable, 300 * MS);
    let d = fail(&mut call(true), &status, None, z, rules(&r));
    assert_eq!(
        (retry_after(&d), d.reason),
        (Some(300 * MS), Reason::RetryInfo)
    );
}

/// Rule 10: a retry that would start at or past the deadline is not
/// scheduled; the attempt's status is delivered.
#[test]
fn rule_10_no_retry_past_the_deadline() {
    let r = fixed();
    let status = with_retry_info(Code::Unavailable, Duration::from_secs(10));
    let mut s = call(true).with_deadline(Duration::ZERO, Duration::from_secs(1));
    let d = fail(&mut s, &status, None, 10 * MS, rules(&r));
    assert_eq!(d.reason, Reason::Deadline);
    assert!(matches!(d.next, Next::Deliver));
    // Exactly at the deadline is past it; just before is not.
    let mut s = call(true).with_deadline(Duration::ZERO, 100 * MS);
    let d = fail(&mut s, &unavailable(), None, 50 * MS, rules(&r));
    assert_eq!(d.reason, Reason::Deadline);
    let mut s = call(true).with_deadline(Duration::ZERO, 100 * MS);
    let d = fail(&mut s, &unavailable(), None, 49 * MS, rules(&r));
    assert_eq!(retry_after(&d), Some(50 * MS));
}

/// Rule 11: otherwise, retry; the attempt count feeds
/// `grpc-previous-rpc-attempts`.
#[test]
fn rule_11_retry_and_attempt_count() {
    let r = fixed();
    let mut s = call(true);
    for (i, want) in [50, 200, 800].into_iter().enumerate() {
        let d = fail(&mut s, &unavailable(), None, Duration::ZERO, rules(&r));
        assert_eq!(retry_after(&d), Some(want * MS));
        assert_eq!(s.attempts(), i as u32 + 1);
    }
    assert_eq!(s.retry_state().unwrap().retries(), 3);
}

/// Durations too large for the clock never panic: the deadline is "none",
/// the attempt limit is the per-attempt timeout, and a wait that overflows
/// the clock counts as past any deadline.
#[test]
fn huge_durations_do_not_overflow() {
    let r = fixed();
    let now = Duration::from_secs(1_000_000);
    let mut s = call(true)
        .with_deadline(now, Duration::MAX)
        .with_attempt_timeout(Some(Duration::MAX));
    assert_eq!(s.begin_attempt(now), Some(Duration::MAX));
    let d = decide(&mut s, Outcome::TimedOut, now, rules(&r));
    assert_eq!(retry_after(&d), Some(50 * MS));
    let mut s = call(true).with_deadline(now, Duration::from_secs(1));
    let pb = Some(Pushback::After(Duration::MAX));
    let d = fail(&mut s, &unavailable(), pb, now, rules(&r));
    assert_eq!(d.reason, Reason::Deadline);
}

fn pushback_wait(retrying: &Retrying, value: &'static str) -> Duration {
    let mut headers = HeaderMap::new();
    headers.insert(
        GRPC_RETRY_PUSHBACK_MS,
        http::HeaderValue::from_static(value),
    );
    let pushback = Pushback::from_headers(&headers);
    let mut call = CallState::new(PathAndQuery::from_static("/s.S/M"), true);
    call.begin_attempt(Duration::ZERO);
    let status = Status::unavailable("busy");
    let rules = Rules {
        retrying,
        throttle: None,
    };
    let outcome = Outcome::Failed {
        status: &status,
        pushback,
    };
    match decide(&mut call, outcome, Duration::ZERO, rules) {
        Decision {
            next: Next::Retry(wait),
            reason: Reason::Pushback,
        } => wait,
        other => panic!("{value}: {other:?}"),
    }
}

#[test]
fn pushback_is_capped_like_retry_info() {
    let default = Retrying::default();
    assert_eq!(
        pushback_wait(&default, "600000"),
        DEFAULT_MAX_SERVER_RETRY_DELAY
    );
    assert_eq!(
        pushback_wait(&default, "600001"),
        DEFAULT_MAX_SERVER_RETRY_DELAY
    );
    assert_eq!(
        pushback_wait(&default, "9223372036854775807"),
        DEFAULT_MAX_SERVER_RETRY_DELAY
    );
    assert_eq!(pushback_wait(&default, "1234"), Duration::from_millis(1234));
    let short = RetryPolicy::builder()
        .max_server_retry_delay(Some(Duration::from_secs(2)))
        .build()
        .unwrap();
    let short = Retrying::new(vec![short]);
    assert_eq!(pushback_wait(&short, "5000"), Duration::from_secs(2));
    let uncapped = RetryPolicy::builder()
        .max_server_retry_delay(None)
        .build()
        .unwrap();
    let uncapped = Retrying::new(vec![uncapped]);
    assert_eq!(
        pushback_wait(&uncapped, "9223372036854775807"),
        Duration::from_millis(i64::MAX as u64)
    );
}

/// The policies classify a failure once per attempt, the throttle's
/// bookkeeping included.
#[test]
fn one_classification_per_failure() {
    let calls = Arc::new(AtomicU32::new(0));
    let counted = calls.clone();
    let policy = RetryPolicy::builder()
        .classifier(FnClassifier::new("counting", move |_| {
            counted.fetch_add(1, Ordering::SeqCst);
            true
        }))
        .build()
        .unwrap();
    let retrying = Retrying::new(vec![policy]);
    let throttle = RetryThrottle::new(10, 0.1).unwrap();
    let rules = Rules {
        retrying: &retrying,
        throttle: Some(&throttle),
    };
    let mut call = CallState::new(PathAndQuery::from_static("/s.S/M"), true);
    let status = Status::unavailable("busy");
    for attempt in 1..=3 {
        call.begin_attempt(Duration::ZERO);
        let outcome = Outcome::Failed {
            status: &status,
            pushback: None,
        };
        let d = decide(&mut call, outcome, Duration::ZERO, rules);
        assert!(matches!(d.next, Next::Retry(_)));
        assert_eq!(calls.load(Ordering::SeqCst), attempt);
    }
    assert_eq!(throttle.tokens(), 7.0);
}
