//! A second client beside the main one: the generated stub under
//! `tonic-retry`'s `RetryLayer`, built from a gRPC service config (gRFC
//! A6), on a host of its own (`ops`), making unary calls at the same
//! server or guard while the main client runs its queries.
//!
//! *Why:* the layer is what any tonic program gets from `tonic-retry`, and
//! its rules (which codes, how many attempts, the backoff, the deadline)
//! are A6's, not PySpark's. The server's script fails the first
//! `unavailable` `AnalyzePlan` calls it receives with `UNAVAILABLE` (no
//! other client sends one), so on a world that loses nothing else the
//! outcome of every call and the number of attempts are known in advance:
//! a call fails only when the failures left for it reach
//! `MAX_ATTEMPTS`. `Config` calls are never failed on purpose.

use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use spark_connect_stub::spark::connect as pb;
use spark_connect_testkit::{Fault as KitFault, Rpc};
use tonic::Code;
use tonic_retry::layer::{RetryLayer, RetryStats, ServiceConfig};
use tonic_retry::metrics::GrpcMetrics;
use tonic_retry::policy::Failure;
use tonic_retry::retrying::Retrying;
use tonic_retry_echo::metrics::Pipeline;
use tower::Layer;

use crate::client::Ids;
use crate::trace::Trace;

/// Attempts per call in the service config, the first included.
pub(crate) const MAX_ATTEMPTS: u32 = 4;

/// Each call's deadline in the service config.
pub(crate) const DEADLINE: Duration = Duration::from_secs(30);

/// The longest wait between attempts in the service config.
pub(crate) const MAX_BACKOFF: Duration = Duration::from_secs(1);

/// The `ops` client's service config: both methods retried on
/// `UNAVAILABLE`, [`MAX_ATTEMPTS`] attempts, a [`DEADLINE`] per call.
const SERVICE_CONFIG: &str = r#"{
  "methodConfig": [{
    "name": [
      {"service": "spark.connect.SparkConnectService", "method": "AnalyzePlan"},
      {"service": "spark.connect.SparkConnectService", "method": "Config"}
    ],
    "timeout": "30s",
    "retryPolicy": {
      "maxAttempts": 4,
      "initialBackoff": "0.1s",
      "maxBackoff": "1s",
      "backoffMultiplier": 2,
      "retryableStatusCodes": ["UNAVAILABLE"]
    }
  }]
}"#;

/// The share of seeds with an `ops` client.
const SHARE: f64 = 0.3;

/// What the `ops` client does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UnaryPlan {
    /// Calls, one after another: `AnalyzePlan` (the Spark version) at even
    /// positions, `Config` (a get) at odd ones.
    pub calls: u32,
    /// The server fails this many `AnalyzePlan` calls, the first it
    /// receives, with `UNAVAILABLE`.
    pub unavailable: u32,
}

/// One call's outcome: `Ok`, or its status code (as grpc-core reports it)
/// and message.
pub type CallOutcome = Result<(), (Code, String)>;

/// What the `ops` client did.
#[derive(Debug, Clone, Default)]
pub struct UnaryResult {
    /// Each call's outcome, in order.
    pub outcomes: Vec<CallOutcome>,
    /// How long each call took (simulated time).
    pub durations: Vec<Duration>,
    /// The layer's counters at the end.
    pub stats: RetryStats,
    /// What its meter provider received (gRFC A66), read at the end.
    pub metrics: UnaryMetrics,
}

/// The layer's gRPC instruments as its meter provider received them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct UnaryMetrics {
    /// `grpc.client.attempt.started` of `AnalyzePlan`.
    pub analyze_attempts: u64,
    /// `grpc.client.attempt.started` of every method.
    pub attempts: u64,
    /// Calls ended (`grpc.client.call.duration`'s count).
    pub calls: u64,
}

impl UnaryMetrics {
    fn read(pipeline: &Pipeline) -> UnaryMetrics {
        let recorded = pipeline.read();
        let started = recorded.of("grpc.client.attempt.started");
        let analyze = "spark.connect.SparkConnectService/AnalyzePlan";
        UnaryMetrics {
            analyze_attempts: started
                .iter()
                .filter(|p| p.labels.get("grpc.method").map(String::as_str) == Some(analyze))
                .map(|p| p.sum as u64)
                .sum(),
            attempts: started.iter().map(|p| p.sum as u64).sum(),
            calls: recorded
                .of("grpc.client.call.duration")
                .iter()
                .map(|p| p.count)
                .sum(),
        }
    }
}

impl UnaryPlan {
    /// Draws the plan of `seed`, if it has an `ops` client (from a stream
    /// of its own, so that the rest of a seed's schedule stays as it was).
    pub(crate) fn draw(seed: u64) -> Option<UnaryPlan> {
        let mut rng = StdRng::seed_from_u64(seed ^ 0x0005_ca11);
        rng.random_bool(SHARE).then(|| UnaryPlan {
            calls: rng.random_range(2..8),
            unavailable: rng.random_range(0..10),
        })
    }

    /// The server's faults for it.
    pub(crate) fn kit_faults(&self) -> Vec<KitFault> {
        if self.unavailable == 0 {
            return vec![];
        }
        vec![
            KitFault::unavailable()
                .on(Rpc::AnalyzePlan)
                .times(self.unavailable),
        ]
    }

    /// Whether call `i` is an `AnalyzePlan`.
    pub(crate) fn is_analyze(i: u32) -> bool {
        i.is_multiple_of(2)
    }

    /// Each call's outcome (`true`: answered) and the attempts in all, on
    /// a world that loses nothing else.
    pub(crate) fn expected(&self) -> (Vec<bool>, u64) {
        let mut left = self.unavailable;
        let mut attempts = 0;
        let outcomes = (0..self.calls)
            .map(|i| {
                let failures = if Self::is_analyze(i) {
                    left.min(MAX_ATTEMPTS)
                } else {
                    0
                };
                left -= failures;
                let answered = failures < MAX_ATTEMPTS;
                attempts += u64::from(failures) + u64::from(answered);
                answered
            })
            .collect();
        (outcomes, attempts)
    }
}

/// The code a gRPC client would report for `status`: tonic reports a
/// broken connection as `Unknown`, grpc-core as `UNAVAILABLE`.
fn grpc_code(status: &tonic::Status) -> Code {
    if Failure::new(status).kind().is_transport() {
        Code::Unavailable
    } else {
        status.code()
    }
}

/// Makes `plan`'s calls at `target` from the current simulated host.
pub async fn run_unary(plan: UnaryPlan, target: &str, seed: u64, trace: &Trace) -> UnaryResult {
    let layer = match ServiceConfig::from_json(SERVICE_CONFIG) {
        Ok(config) => {
            RetryLayer::from_service_config(&config, Retrying::default().with_seed(seed ^ 0x0e5))
        }
        Err(e) => {
            trace.now(format!("ops: bad service config: {e}"));
            return UnaryResult::default();
        }
    };
    let pipeline = Pipeline::new();
    let layer = layer.metrics(GrpcMetrics::from_provider(pipeline.provider()));
    let stats = layer.stats_handle();
    let channel = crate::net::channel(target, None);
    let mut client =
        pb::spark_connect_service_client::SparkConnectServiceClient::new(layer.layer(channel));
    let session_id = Ids::from_seed(seed ^ 0x0e5).session;
    let mut outcomes = vec![];
    let mut durations = vec![];
    for i in 0..plan.calls {
        let started = tokio::time::Instant::now();
        let outcome = if UnaryPlan::is_analyze(i) {
            let request = pb::AnalyzePlanRequest {
                session_id: session_id.clone(),
                analyze: Some(pb::analyze_plan_request::Analyze::SparkVersion(
                    pb::analyze_plan_request::SparkVersion {},
                )),
                ..Default::default()
            };
            client.analyze_plan(request).await.map(drop)
        } else {
            let request = pb::ConfigRequest {
                session_id: session_id.clone(),
                operation: Some(pb::config_request::Operation {
                    op_type: Some(pb::config_request::operation::OpType::GetAll(
                        pb::config_request::GetAll { prefix: None },
                    )),
                }),
                ..Default::default()
            };
            client.config(request).await.map(drop)
        };
        let outcome = outcome.map_err(|s| (grpc_code(&s), s.message().to_owned()));
        trace.now(format!("ops: call {i} {outcome:?}"));
        outcomes.push(outcome);
        durations.push(started.elapsed());
    }
    UnaryResult {
        outcomes,
        durations,
        stats: stats.snapshot(),
        metrics: UnaryMetrics::read(&pipeline),
    }
}
