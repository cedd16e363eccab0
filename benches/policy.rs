//! Cost of one retry decision (classify + next wait) on a fresh state.
//!
//! Targets: a status without details < 100 ns; one carrying `RetryInfo`
//! in `grpc-status-details-bin` < 1 µs.

use std::hint::black_box;
use std::time::Duration;

use criterion::{BatchSize, Criterion, criterion_group, criterion_main};
use spark_connect_retry::policy::{Classifier, Failure, PySparkClassifier};
use spark_connect_retry::retrying::{AttemptError, PySparkRetrying, Retrying};
use tonic::{Code, Status};
use tonic_types::{ErrorDetails, StatusExt};

fn statuses() -> Vec<(&'static str, Status)> {
    vec![
        ("unavailable", Status::unavailable("connection refused")),
        (
            // UNAVAILABLE is retryable by code; RetryInfo is decoded once for the delay.
            "unavailable+retry_info",
            Status::with_error_details(
                Code::Unavailable,
                "busy",
                ErrorDetails::with_retry_info(Some(Duration::from_millis(1500))),
            ),
        ),
        (
            // Any other code is retryable only through RetryInfo, so the
            // classifier has to look into the details too.
            "resource_exhausted+retry_info",
            Status::with_error_details(
                Code::ResourceExhausted,
                "slow down",
                ErrorDetails::with_retry_info(Some(Duration::from_millis(1500))),
            ),
        ),
        // The give-up path: not retryable, no details.
        ("internal_not_retryable", Status::internal("Fatal")),
    ]
}

fn bench(c: &mut Criterion) {
    let retrying = Retrying::pyspark().with_seed(1);

    let mut g = c.benchmark_group("retrying_decide_fresh_state");
    for (name, status) in statuses() {
        let error: AttemptError<std::convert::Infallible> = AttemptError::Status(status);
        g.bench_function(name, |b| {
            b.iter_batched_ref(
                || retrying.new_state(),
                |state| retrying.decide(state, black_box(&error)),
                BatchSize::SmallInput,
            )
        });
    }
    g.finish();

    // State construction alone, for reference: it is what a driver pays
    // once per loop (and the reattachable stream once per delivered response).
    c.bench_function("retry_state_new", |b| {
        b.iter(|| black_box(&retrying).new_state())
    });

    let mut g = c.benchmark_group("classify");
    for (name, status) in statuses() {
        g.bench_function(format!("classify_failure/{name}"), |b| {
            b.iter(|| Failure::new(black_box(&status)).kind())
        });
        g.bench_function(format!("default_can_retry/{name}"), |b| {
            b.iter(|| PySparkClassifier.can_retry(&Failure::new(black_box(&status))))
        });
    }
    g.finish();
}

criterion_group! {
    name = benches;
    // Short runs: the machine has 2 cores and other work to do.
    config = Criterion::default()
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2));
    targets = bench
}
criterion_main!(benches);
