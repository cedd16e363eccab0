//! PySpark 4.3.0's retry tests, ported against `RetryPolicy` and `Retrying`
//! with an injected sleeper, clock and seed: `test_connect_retry.py`
//! (`RetryTests`) and `test_client_retries.py`
//! (`SparkConnectClientRetriesTestCase`), both under
//! `python/pyspark/sql/tests/connect/`. Each test names the upstream test it
//! ports; the others check `DefaultPolicy`'s backoff arithmetic, whose figures
//! come from running PySpark 4.3.0's `retries.py`.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use spark_connect_retry::policy::{Classifier, Failure, FnClassifier, PySparkPolicy, RetryPolicy};
use spark_connect_retry::retrying::{AttemptError, PySparkRetrying, Retrying};
use tonic::{Code, Status};
use tonic_retry::retrying::{ManualClock, RecordingSleeper};
use tonic_types::{ErrorDetails, StatusExt};

fn no_jitter() -> RetryPolicy {
    RetryPolicy::pyspark_builder()
        .jitter_ms(0.0)
        .build()
        .unwrap()
}

/// PySpark's `TestPolicy`: max 3, initial 10 ms, max_backoff 10 ms, jitter 10 ms from 10 ms.
fn test_policy() -> RetryPolicy {
    RetryPolicy::pyspark_builder()
        .name("TestPolicy")
        .max_retries(Some(3))
        .backoff_multiplier(4.0)
        .initial_backoff_ms(10.0)
        .max_backoff_ms(Some(10.0))
        .jitter_ms(10.0)
        .min_jitter_threshold_ms(10.0)
        .build()
        .unwrap()
}

fn retry_info(code: Code, d: Duration) -> Status {
    Status::with_error_details(
        code,
        "server asks to wait",
        ErrorDetails::with_retry_info(Some(d)),
    )
}

/// Drive a policy's arithmetic directly, `n` times, with a fixed jitter sample.
fn waits(policy: &RetryPolicy, errors: &[Option<Duration>], sample: f64) -> Vec<Option<u64>> {
    let mut backoff = policy.backoff();
    errors
        .iter()
        .map(|d| {
            backoff
                .next(*d, &mut || sample)
                .map(|w| w.as_millis() as u64)
        })
        .collect()
}

#[test]
fn default_policy_table_without_jitter() {
    let p = no_jitter();
    let w = waits(&p, &[None; 16], 0.0);
    let expected: Vec<Option<u64>> = [50, 200, 800, 3200, 12800, 51200]
        .into_iter()
        .chain(std::iter::repeat_n(60_000, 9))
        .map(Some)
        .chain([None])
        .collect();
    assert_eq!(w, expected);
    let total: u64 = w.iter().flatten().sum();
    assert_eq!(total, 608_250);
}

#[test]
fn default_policy_max_jitter_only_from_threshold() {
    // sample 1.0 means the full 500 ms; only waits >= 2000 ms get it.
    let w: Vec<u64> = waits(&RetryPolicy::pyspark(), &[None; 15], 1.0)
        .into_iter()
        .flatten()
        .collect();
    assert_eq!(&w[..4], &[50, 200, 800, 3700]);
    assert_eq!(w.iter().sum::<u64>(), 614_250);
}

#[test]
fn jitter_threshold_is_inclusive_and_truncates() {
    let p = RetryPolicy::pyspark_builder()
        .initial_backoff_ms(2000.0)
        .max_backoff_ms(Some(2000.0))
        .build()
        .unwrap();
    assert_eq!(waits(&p, &[None], 0.4999)[0], Some(2249)); // 2000 + 249.95, truncated
}

#[test]
fn without_max_backoff_the_wait_never_grows() {
    let p = RetryPolicy::pyspark_base_builder()
        .initial_backoff_ms(100.0)
        .backoff_multiplier(4.0)
        .build()
        .unwrap();
    assert_eq!(waits(&p, &[None; 3], 0.0), vec![Some(100); 3]);
}

/// `test_client_retries.py::SparkConnectClientRetriesTestCase::test_return_to_exponential_backoff`:
/// 5 min twice, then 0 three times.
#[test]
fn retry_info_is_a_floor_that_never_bends_the_sequence() {
    let p = no_jitter();
    let five = Some(Duration::from_secs(300));
    let zero = Some(Duration::ZERO);
    let w = waits(&p, &[five, five, zero, zero, zero], 0.0);
    assert_eq!(
        w,
        vec![
            Some(300_000),
            Some(300_000),
            Some(800),
            Some(3200),
            Some(12800)
        ]
    );
}

/// `test_client_retries.py::SparkConnectClientRetriesTestCase::test_max_server_retry_delay`,
/// and the cap turned off.
#[test]
fn server_delay_capped_by_max_server_retry_delay_only() {
    let p = no_jitter();
    let ten_hours = Some(Duration::from_secs(36_000));
    assert!(
        waits(&p, &[ten_hours; 15], 0.0)
            .iter()
            .all(|w| *w == Some(600_000))
    );
    let uncapped = RetryPolicy::pyspark_builder()
        .jitter_ms(0.0)
        .max_server_retry_delay(None)
        .build()
        .unwrap();
    assert_eq!(waits(&uncapped, &[ten_hours], 0.0), vec![Some(36_000_000)]);
    // Sub-millisecond nanos are truncated toward zero.
    let p = RetryPolicy::pyspark_builder()
        .jitter_ms(0.0)
        .min_jitter_threshold_ms(1e9)
        .build()
        .unwrap();
    assert_eq!(
        waits(&p, &[Some(Duration::from_nanos(1_999_999))], 0.0),
        vec![Some(50)]
    );
    assert_eq!(
        waits(&p, &[Some(Duration::from_micros(75_900))], 0.0),
        vec![Some(75)]
    );
}

#[test]
fn builder_rejects_bad_values_naming_the_field() {
    let e = RetryPolicy::pyspark_builder()
        .backoff_multiplier(f64::NAN)
        .build()
        .unwrap_err();
    assert_eq!(e.field(), "backoff_multiplier");
    assert!(e.to_string().contains("backoff_multiplier"), "{e}");
    for (field, r) in [
        (
            "initial_backoff",
            RetryPolicy::pyspark_builder()
                .initial_backoff_ms(-1.0)
                .build(),
        ),
        (
            "max_backoff",
            RetryPolicy::pyspark_builder()
                .max_backoff_ms(Some(f64::INFINITY))
                .build(),
        ),
        (
            "jitter",
            RetryPolicy::pyspark_builder().jitter_ms(-0.5).build(),
        ),
        (
            "min_jitter_threshold",
            RetryPolicy::pyspark_builder()
                .min_jitter_threshold_ms(f64::NEG_INFINITY)
                .build(),
        ),
        (
            "max_server_retry_delay",
            RetryPolicy::pyspark_builder()
                .max_server_retry_delay_ms(Some(f64::NAN))
                .build(),
        ),
        (
            "backoff_multiplier",
            RetryPolicy::pyspark_builder()
                .backoff_multiplier(0.0)
                .build(),
        ),
    ] {
        assert_eq!(r.unwrap_err().field(), field);
    }
}

// ---- Retrying loop: test_connect_retry.py (RetryTests) ---------------------

fn any_error_policy(max: u32) -> RetryPolicy {
    RetryPolicy::pyspark_base_builder()
        .classifier(FnClassifier::new("any", |_| true))
        .max_retries(Some(max))
        .initial_backoff_ms(10.0)
        .build()
        .unwrap()
}

/// A classifier of one code, as PySpark's tests write `can_retry`.
fn codes(code: Code) -> impl Classifier {
    FnClassifier::new("code", move |f: &Failure<'_>| f.code() == code)
}

fn code_policy(code: Code, max: u32) -> RetryPolicy {
    RetryPolicy::pyspark_base_builder()
        .name(format!("{code:?}"))
        .classifier(codes(code))
        .max_retries(Some(max))
        .initial_backoff_ms(10.0)
        .build()
        .unwrap()
}

/// Runs a script of errors (then success) and returns (result, attempts, sleeps).
async fn script(retrying: Retrying, errors: Vec<Status>) -> (Result<u32, Status>, u32, Vec<u64>) {
    let sleeper = RecordingSleeper::new();
    let retrying = retrying.with_sleeper(sleeper.clone()).with_seed(1);
    let n = AtomicU32::new(0);
    let errors = Arc::new(errors);
    let r = retrying
        .call(|| {
            let i = n.fetch_add(1, Ordering::SeqCst) as usize;
            let errors = errors.clone();
            async move {
                match errors.get(i) {
                    Some(e) => Err(e.clone()),
                    None => Ok(i as u32),
                }
            }
        })
        .await;
    (r, n.load(Ordering::SeqCst), sleeper.sleeps_ms())
}

/// `test_connect_retry.py::RetryTests::test_simple` and `::test_below_limit`.
#[tokio::test]
async fn simple_and_below_limit() {
    let (r, attempts, sleeps) = script(
        Retrying::pyspark_with(vec![any_error_policy(1)]),
        vec![Status::internal("x")],
    )
    .await;
    assert_eq!((r.unwrap(), attempts, sleeps), (1, 2, vec![10]));
    let (r, attempts, _) = script(
        Retrying::pyspark_with(vec![any_error_policy(4)]),
        vec![Status::internal("x")],
    )
    .await;
    assert_eq!((r.unwrap(), attempts), (1, 2));
}

/// `test_connect_retry.py::RetryTests::test_exceed_retries`.
#[tokio::test]
async fn exceed_retries_returns_the_original_error() {
    let errs = vec![Status::internal("boom"); 4];
    let (r, attempts, sleeps) =
        script(Retrying::pyspark_with(vec![any_error_policy(2)]), errs).await;
    let e = r.unwrap_err();
    assert_eq!((e.code(), e.message()), (Code::Internal, "boom"));
    assert_eq!((attempts, sleeps.len()), (3, 2));
}

/// `test_connect_retry.py::RetryTests::test_rejected_by_policy` and
/// `::test_throw_not_retriable_error`.
#[tokio::test]
async fn non_retryable_error_propagates_at_once() {
    let (r, attempts, sleeps) = script(
        Retrying::pyspark_with(vec![code_policy(Code::Unavailable, 4)]),
        vec![Status::internal("nope")],
    )
    .await;
    assert_eq!(r.unwrap_err().code(), Code::Internal);
    assert_eq!((attempts, sleeps.len()), (1, 0));
    // A non-gRPC error never retries, even with a catch-all policy.
    let retrying = Retrying::pyspark_with(vec![any_error_policy(5)]);
    let n = AtomicU32::new(0);
    let (r, _): (Result<(), AttemptError<std::io::Error>>, _) = retrying
        .run(|| {
            n.fetch_add(1, Ordering::SeqCst);
            async { Err(AttemptError::Other(std::io::Error::other("value error"))) }
        })
        .await;
    assert!(matches!(r, Err(AttemptError::Other(_))));
    assert_eq!(n.load(Ordering::SeqCst), 1);
}

/// `test_connect_retry.py::RetryTests::test_specific_exception` and
/// `::test_specific_exception_exceed_retries`.
#[tokio::test]
async fn specific_exception_and_exceed() {
    let (r, attempts, _) = script(
        Retrying::pyspark_with(vec![code_policy(Code::Unavailable, 4)]),
        vec![Status::unavailable("u")],
    )
    .await;
    assert_eq!((r.is_ok(), attempts), (true, 2));
    let (r, attempts, _) = script(
        Retrying::pyspark_with(vec![code_policy(Code::Unavailable, 2)]),
        vec![Status::unavailable("u"); 10],
    )
    .await;
    assert_eq!((r.unwrap_err().code(), attempts), (Code::Unavailable, 3));
}

/// `test_connect_retry.py::RetryTests::test_multiple_policies`.
#[tokio::test]
async fn multiple_policies_each_with_its_own_budget() {
    let mut errs = vec![Status::unavailable("u"); 2];
    errs.extend(vec![Status::internal("i"); 4]);
    let (r, attempts, _) = script(
        Retrying::pyspark_with(vec![
            code_policy(Code::Unavailable, 2),
            code_policy(Code::Internal, 4),
        ]),
        errs,
    )
    .await;
    assert_eq!((r.unwrap(), attempts), (6, 7));
}

/// `test_connect_retry.py::RetryTests::test_multiple_policies_exceed` (4.1+:
/// no fallback to a later policy).
#[tokio::test]
async fn first_matching_policy_decides_without_fallback() {
    let (r, attempts, _) = script(
        Retrying::pyspark_with(vec![
            code_policy(Code::Internal, 2),
            code_policy(Code::Internal, 4),
        ]),
        vec![Status::internal("i"); 10],
    )
    .await;
    assert_eq!((r.is_err(), attempts), (true, 3));
}

/// Not upstream: two policies' budgets interleaved within one loop.
#[tokio::test]
async fn budgets_interleave_per_policy() {
    // A(UNAVAILABLE, max 1, 10 ms), B(ABORTED, max 5, 20 ms); errors U, AB, AB, U.
    let a = code_policy(Code::Unavailable, 1);
    let b = RetryPolicy::pyspark_base_builder()
        .classifier(codes(Code::Aborted))
        .max_retries(Some(5))
        .initial_backoff_ms(20.0)
        .build()
        .unwrap();
    let errs = vec![
        Status::unavailable("u"),
        Status::aborted("a"),
        Status::aborted("a"),
        Status::unavailable("u2"),
    ];
    let (r, attempts, sleeps) = script(Retrying::pyspark_with(vec![a, b]), errs).await;
    assert_eq!(r.unwrap_err().message(), "u2");
    assert_eq!((attempts, sleeps), (4, vec![10, 20, 20]));
}

// ---- DefaultPolicy: client/test_client_retries.py ------------------------

/// `test_client_retries.py::SparkConnectClientRetriesTestCase::test_retry`,
/// with the exact sleeps instead of its `>= 600` ms lower bound.
#[tokio::test]
async fn default_policy_unavailable_forever_sleeps_15_times() {
    let (r, attempts, sleeps) =
        script(Retrying::pyspark(), vec![Status::unavailable("down"); 100]).await;
    assert_eq!(r.unwrap_err().code(), Code::Unavailable);
    assert_eq!((attempts, sleeps.len()), (16, 15));
    let total: u64 = sleeps.iter().sum();
    assert!((608_250..=614_250).contains(&total), "{total}");
    for (i, s) in sleeps.iter().enumerate() {
        let base = (50u64 * 4u64.pow(i as u32)).min(60_000);
        let jitter = if base >= 2000 { 500 } else { 0 };
        assert!((base..=base + jitter).contains(s), "sleep {i}: {s}");
    }
}

/// `test_client_retries.py::SparkConnectClientRetriesTestCase::test_default_policy_retries_retry_info`.
#[tokio::test]
async fn retry_info_makes_unimplemented_retryable() {
    let (_, attempts, sleeps) = script(
        Retrying::pyspark(),
        vec![retry_info(Code::Unimplemented, Duration::ZERO); 100],
    )
    .await;
    assert_eq!((attempts, sleeps.len()), (16, 15));
}

/// `test_client_retries.py::SparkConnectClientRetriesTestCase::test_retry_delay_overrides_max_backoff`.
#[tokio::test]
async fn retry_delay_overrides_max_backoff() {
    let (_, _, sleeps) = script(
        Retrying::pyspark(),
        vec![retry_info(Code::Unavailable, Duration::from_secs(300)); 100],
    )
    .await;
    assert_eq!(sleeps.len(), 15);
    assert!(
        sleeps.iter().all(|s| (300_000..=300_500).contains(s)),
        "{sleeps:?}"
    );
}

/// `test_client_retries.py::SparkConnectClientRetriesTestCase::test_deadline_exceeded_not_retried_by_retry_handler`
/// and `::test_deadline_exceeded_is_not_retried_for_non_retryable_codes`.
#[tokio::test]
async fn deadline_exceeded_is_not_retried() {
    let (r, attempts, sleeps) =
        script(Retrying::pyspark(), vec![Status::deadline_exceeded("late")]).await;
    assert_eq!(
        (r.unwrap_err().code(), attempts, sleeps.len()),
        (Code::DeadlineExceeded, 1, 0)
    );
    let (_, attempts, _) = script(Retrying::pyspark(), vec![Status::aborted("a")]).await;
    assert_eq!(attempts, 1);
}

/// Drives immediate retries with a manual clock that gains `step` per attempt.
async fn retry_now_script(
    policies: Vec<RetryPolicy>,
    bound: Duration,
    step: Duration,
    script: Vec<AttemptError>,
) -> (Result<usize, AttemptError>, usize) {
    let clock = ManualClock::new();
    let retrying = Retrying::pyspark_with(policies)
        .with_sleeper(RecordingSleeper::new())
        .with_clock(clock.clone())
        .with_retry_now_bound(bound);
    let n = AtomicU32::new(0);
    let script = Arc::new(std::sync::Mutex::new(script.into_iter()));
    let r = retrying
        .run(|| {
            let i = n.fetch_add(1, Ordering::SeqCst) as usize;
            if i > 0 {
                clock.advance(step);
            }
            let next = script.lock().unwrap().next();
            async move {
                match next {
                    Some(e) => Err(e),
                    None => Ok(i),
                }
            }
        })
        .await
        .0;
    (r, n.load(Ordering::SeqCst) as usize)
}

fn deadline_marker() -> AttemptError {
    AttemptError::RetryNow(Some(Status::deadline_exceeded("cause")))
}

/// `test_client_retries.py::SparkConnectClientRetriesTestCase::test_retry_exception_bounded_by_elapsed_time`.
#[tokio::test]
async fn retry_now_bounded_by_elapsed_time_returns_cause() {
    let (r, tries) = retry_now_script(
        vec![],
        Duration::from_secs(3600),
        Duration::from_secs(600),
        (0..100).map(|_| deadline_marker()).collect(),
    )
    .await;
    assert_eq!(tries, 7);
    match r {
        Err(AttemptError::Status(s)) => {
            assert_eq!((s.code(), s.message()), (Code::DeadlineExceeded, "cause"))
        }
        other => panic!("{other:?}"),
    }
}

/// `test_client_retries.py::SparkConnectClientRetriesTestCase::test_retry_exception_below_bound_keeps_retrying`.
#[tokio::test]
async fn retry_now_below_bound_keeps_retrying() {
    let (r, tries) = retry_now_script(
        vec![],
        Duration::from_secs(3600),
        Duration::from_secs(10),
        (0..3).map(|_| deadline_marker()).collect(),
    )
    .await;
    assert_eq!((r.unwrap(), tries), (3, 4));
}

/// `test_client_retries.py::SparkConnectClientRetriesTestCase::test_retry_exception_bare_no_cause_raises_self_when_bound_exceeded`.
#[tokio::test]
async fn bare_retry_now_returns_itself() {
    let (r, tries) = retry_now_script(
        vec![],
        Duration::from_secs(100),
        Duration::from_secs(30),
        (0..100).map(|_| AttemptError::RetryNow(None)).collect(),
    )
    .await;
    assert_eq!(tries, 5);
    assert!(matches!(r, Err(AttemptError::RetryNow(None))));
}

/// `test_client_retries.py::SparkConnectClientRetriesTestCase::test_retry_exception_elapsed_clock_starts_at_first_retry_exception`.
#[tokio::test]
async fn retry_now_clock_starts_at_first_marker() {
    let mut script = vec![
        AttemptError::Status(Status::unavailable("u")),
        AttemptError::Status(Status::unavailable("u")),
    ];
    script.extend((0..100).map(|_| deadline_marker()));
    let (r, tries) = retry_now_script(
        vec![RetryPolicy::pyspark()],
        Duration::from_secs(3600),
        Duration::from_secs(600),
        script,
    )
    .await;
    assert_eq!(tries, 9);
    assert!(matches!(r, Err(AttemptError::Status(s)) if s.code() == Code::DeadlineExceeded));
}

#[tokio::test]
async fn retry_now_works_with_no_policies() {
    let (r, tries) = retry_now_script(
        vec![],
        Duration::from_secs(3600),
        Duration::ZERO,
        vec![AttemptError::RetryNow(None)],
    )
    .await;
    assert_eq!((r.unwrap(), tries), (1, 2));
}

/// `test_client_retries.py::SparkConnectClientRetriesTestCase::test_warning_works`.
#[tokio::test]
async fn test_policy_sleeps_between_10_and_20_ms() {
    let (r, attempts, sleeps) = script(
        Retrying::pyspark_with(vec![test_policy()]),
        vec![Status::unavailable("u"); 3],
    )
    .await;
    assert_eq!((r.unwrap(), attempts), (3, 4));
    assert!(sleeps.iter().all(|s| (10..=20).contains(s)), "{sleeps:?}");
}
