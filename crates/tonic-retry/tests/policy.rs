//! The policy and the retry loop: property tests of the arithmetic here;
//! failures classified over real sockets and the loop's give-up events in
//! the files of `policy/`.

mod support;

mod policy {
    mod give_up;
    mod transport;
}

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use proptest::prelude::*;
use tonic::Status;
use tonic_retry::policy::{FnClassifier, RetryPolicy};
use tonic_retry::retrying::{RecordingSleeper, Retrying};
use tonic_types::{ErrorDetails, StatusExt};

fn arb_policy() -> impl Strategy<Value = RetryPolicy> {
    (
        proptest::option::of(0u32..20),
        0.0f64..5_000.0,
        proptest::option::of(0.0f64..100_000.0),
        0.5f64..8.0,
        0.0f64..1_000.0,
        0.0f64..5_000.0,
        any::<bool>(),
        proptest::option::of(0.0f64..1_000_000.0),
    )
        .prop_map(|(max, init, maxb, mult, jit, thr, rec, cap)| {
            RetryPolicy::builder()
                .classifier(FnClassifier::new("any", |_| true))
                .proportional_jitter(0.0)
                .max_retries(max)
                .initial_backoff_ms(init)
                .max_backoff_ms(maxb)
                .backoff_multiplier(mult)
                .jitter_ms(jit)
                .min_jitter_threshold_ms(thr)
                .recognize_server_retry_delay(rec)
                .max_server_retry_delay_ms(cap)
                .build()
                .unwrap()
        })
}

fn status_with_delay(d: Option<u64>) -> Status {
    match d {
        Some(ms) => Status::with_error_details(
            tonic::Code::Unavailable,
            "u",
            ErrorDetails::with_retry_info(Some(Duration::from_millis(ms))),
        ),
        None => Status::unavailable("u"),
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    /// No wait exceeds max(max_backoff (or initial when unset), min(server delay, cap)) + jitter.
    #[test]
    fn waits_are_bounded(policy in arb_policy(), delays in proptest::collection::vec(proptest::option::of(0u64..2_000_000), 1..30), seed in any::<u64>()) {
        let mut waits = policy.backoff();
        let mut rng = <rand::rngs::StdRng as rand::SeedableRng>::seed_from_u64(seed);
        let backoff_cap = policy.max_backoff().unwrap_or(policy.initial_backoff()).max(policy.initial_backoff());
        for d in delays {
            let server = d.map(Duration::from_millis);
            let Some(wait) = waits.next(server, &mut || rand::Rng::random::<f64>(&mut rng)) else { break };
            let floor = match (policy.recognize_server_retry_delay(), server) {
                (true, Some(s)) => policy.max_server_retry_delay().map_or(s, |c| s.min(c)),
                _ => Duration::ZERO,
            };
            let bound = backoff_cap.max(floor) + policy.jitter() + Duration::from_millis(1);
            prop_assert!(wait <= bound, "wait {wait:?} > bound {bound:?}");
        }
    }

    /// Attempts never exceed max_retries + 1, and the loop returns the last error.
    /// gRFC A6's proportional jitter: every wait within ±factor of the
    /// backoff min(initial × multiplier^(n-1), max).
    #[test]
    fn proportional_jitter_bounds(factor in 0.0f64..=1.0, sample in 0.0f64..1.0, n in 1u32..8) {
        let p = RetryPolicy::builder()
            .initial_backoff(Duration::from_millis(100))
            .max_backoff(Some(Duration::from_secs(1)))
            .backoff_multiplier(2.0)
            .proportional_jitter(factor)
            .max_retries(None)
            .build()
            .unwrap();
        let mut waits = p.backoff();
        let mut wait = Duration::ZERO;
        for _ in 0..n {
            wait = waits.next(None, &mut || sample).unwrap();
        }
        let backoff = (100.0 * 2f64.powi(n as i32 - 1)).min(1000.0);
        let ms = wait.as_millis() as f64;
        prop_assert!(ms >= (backoff * (1.0 - factor)).floor() - 1.0, "{ms} {backoff}");
        prop_assert!(ms <= backoff * (1.0 + factor), "{ms} {backoff}");
    }

    #[test]
    fn attempts_bounded(max in 0u32..12, fail in 0u32..30) {
        support::capture::init(); // before the loop's code runs (policy/give_up.rs captures)
        let policy = RetryPolicy::builder().max_retries(Some(max)).build().unwrap();
        let sleeper = RecordingSleeper::new();
        let retrying = Retrying::new(vec![policy]).with_sleeper(sleeper.clone()).with_seed(1);
        let n = AtomicU32::new(0);
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let r = rt.block_on(retrying.call(|| {
            let i = n.fetch_add(1, Ordering::SeqCst);
            async move { if i < fail { Err(Status::unavailable(format!("e{i}"))) } else { Ok(i) } }
        }));
        let attempts = n.load(Ordering::SeqCst);
        prop_assert!(attempts <= max + 1);
        prop_assert_eq!(sleeper.sleeps().len() as u32, attempts - 1);
        if fail > max {
            let e = r.unwrap_err();
            prop_assert_eq!(e.message(), format!("e{}", max));
        } else {
            prop_assert_eq!(r.unwrap(), fail);
        }
    }

    /// The same seed gives the same schedule.
    #[test]
    fn same_seed_same_schedule(seed in any::<u64>(), delays in proptest::collection::vec(proptest::option::of(0u64..700_000), 15)) {
        support::capture::init(); // before the loop's code runs (policy/give_up.rs captures)
        let run = || {
            let sleeper = RecordingSleeper::new();
            let retrying = Retrying::default().with_sleeper(sleeper.clone()).with_seed(seed);
            let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
            let i = AtomicU32::new(0);
            let _ = rt.block_on(retrying.call(|| {
                let k = i.fetch_add(1, Ordering::SeqCst) as usize;
                let st = status_with_delay(delays.get(k).copied().flatten());
                async move { Err::<(), _>(st) }
            }));
            sleeper.sleeps()
        };
        prop_assert_eq!(run(), run());
    }
}

#[test]
fn proportional_jitter_is_validated() {
    for bad in [-0.1, 1.5, f64::NAN] {
        let e = RetryPolicy::builder()
            .proportional_jitter(bad)
            .build()
            .unwrap_err();
        assert_eq!(e.field(), "proportional_jitter", "{bad}");
    }
}

#[tokio::test(start_paused = true)]
async fn dropping_the_future_cancels_a_wait_at_once() {
    support::capture::init(); // before the loop's code runs (policy/give_up.rs captures)
    // A 60 s wait under paused time: the retry is pending in its sleep; dropping
    // the future ends it without waiting.
    let retrying = Retrying::new(vec![
        RetryPolicy::builder()
            .initial_backoff(Duration::from_secs(60))
            .build()
            .unwrap(),
    ]);
    let calls = AtomicU32::new(0);
    let fut = retrying.call(|| {
        calls.fetch_add(1, Ordering::SeqCst);
        async { Err::<(), _>(Status::unavailable("u")) }
    });
    let started = tokio::time::Instant::now();
    let r = tokio::time::timeout(Duration::from_secs(1), fut).await;
    assert!(r.is_err(), "still waiting");
    assert_eq!(calls.load(Ordering::SeqCst), 1);
    assert!(started.elapsed() < Duration::from_secs(2));
}
