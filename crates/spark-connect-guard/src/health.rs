//! gRPC health checking (`grpc.health.v1.Health`) on the guard's port:
//! [`HealthCheck`], how the guard decides that its upstream answers.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use spark_connect_retry::transport::GrpcChannel;
use tonic_health::ServingStatus;
use tonic_health::pb::health_client::HealthClient;
use tonic_health::pb::{HealthCheckRequest, health_check_response};
use tonic_health::server::HealthReporter;

use crate::error::GuardError;
use crate::stats::Counters;

/// The service name a probe may ask for besides `""` (the whole guard);
/// both report the same status.
pub const SPARK_CONNECT_SERVICE: &str = "spark.connect.SparkConnectService";

/// How the guard checks its upstream for its health status.
///
/// Every `interval` the guard makes one cheap call upstream, bounded by
/// `timeout`: a `grpc.health.v1.Health/Check`. Spark Connect serves no
/// health service and answers `UNIMPLEMENTED` from its gRPC framework
/// (no session is created, no Spark code runs); a server or gateway that
/// does serve it answers for itself. An answer with any gRPC status counts
/// as alive, except `UNAVAILABLE` (what a load balancer answers for a
/// server it cannot reach) and a health answer of `NOT_SERVING`; a
/// transport failure or the timeout counts as a failure. The guard reports
/// `SERVING` from the first answer on, and `NOT_SERVING` before it and
/// after `failure_threshold` failures in a row.
///
/// Defaults: every 5 s, 2 s timeout, 3 failures (an upstream that stops
/// answering is reported within about 3 × 5 s + 2 s).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[must_use]
pub struct HealthCheck {
    interval: Duration,
    timeout: Duration,
    failure_threshold: u32,
}

impl Default for HealthCheck {
    fn default() -> Self {
        HealthCheck {
            interval: Duration::from_secs(5),
            timeout: Duration::from_secs(2),
            failure_threshold: 3,
        }
    }
}

impl HealthCheck {
    /// The defaults (5 s, 2 s, 3 failures).
    pub fn new() -> Self {
        Self::default()
    }

    /// Time between two checks (more than zero).
    pub fn interval(mut self, interval: Duration) -> Self {
        self.interval = interval;
        self
    }

    /// How long one check may take before it counts as a failure (more
    /// than zero).
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Failed checks in a row before the guard reports `NOT_SERVING` (at
    /// least 1).
    pub fn failure_threshold(mut self, failures: u32) -> Self {
        self.failure_threshold = failures;
        self
    }

    pub(crate) fn validate(&self) -> Result<(), GuardError> {
        let bad = |option: &'static str, reason: &'static str| {
            Err(GuardError::InvalidOption { option, reason })
        };
        if self.interval.is_zero() {
            return bad("health interval", "must be more than zero");
        }
        if self.timeout.is_zero() {
            return bad("health timeout", "must be more than zero");
        }
        if self.failure_threshold == 0 {
            return bad("health failure threshold", "must be at least 1");
        }
        Ok(())
    }
}

/// Sets both names the guard reports (`""` and the Spark Connect service).
pub(crate) async fn report(reporter: &HealthReporter, counters: &Counters, status: ServingStatus) {
    counters
        .serving
        .store(status == ServingStatus::Serving, Ordering::Relaxed);
    reporter.set_service_status("", status).await;
    reporter
        .set_service_status(SPARK_CONNECT_SERVICE, status)
        .await;
}

/// Checks the upstream forever (the guard aborts the task).
pub(crate) async fn watch_upstream(
    channel: GrpcChannel,
    reporter: HealthReporter,
    check: HealthCheck,
    counters: Arc<Counters>,
) {
    let mut failures: u32 = 0;
    let mut serving = false;
    loop {
        if answers(&channel, check.timeout).await {
            failures = 0;
            if !serving {
                tracing::info!("spark-connect-guard: upstream answers: SERVING");
                serving = true;
                report(&reporter, &counters, ServingStatus::Serving).await;
            }
        } else {
            failures = failures.saturating_add(1);
            if serving && failures >= check.failure_threshold {
                tracing::warn!(
                    failures,
                    "spark-connect-guard: upstream unreachable: NOT_SERVING"
                );
                serving = false;
                report(&reporter, &counters, ServingStatus::NotServing).await;
            }
        }
        tokio::time::sleep(check.interval).await;
    }
}

/// One check: does a server answer?
async fn answers(channel: &GrpcChannel, timeout: Duration) -> bool {
    let mut client = HealthClient::new(channel.clone());
    let call = client.check(HealthCheckRequest {
        service: String::new(),
    });
    match tokio::time::timeout(timeout, call).await {
        Err(_) => false,
        Ok(Ok(answer)) => {
            answer.into_inner().status() != health_check_response::ServingStatus::NotServing
        }
        // A status made here from a transport error carries it as its
        // source; one the server sent does not.
        Ok(Err(status)) => {
            status.code() != tonic::Code::Unavailable
                && std::error::Error::source(&status).is_none()
        }
    }
}
