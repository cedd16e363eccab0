//! The tower [`RetryLayer`] (from [`tonic_retry::layer`]), set up for Spark
//! Connect.
//!
//! The layer itself knows nothing of Spark: it retries what its policy and
//! method table allow. Spark Connect needs one table, written here once:
//! every RPC is safe to replay except `ExecutePlan`, whose command may
//! write (the reattachable execution, keyed by its operation id, replays it
//! instead).
//!
//! | RPC | idempotent | kind | why |
//! |---|---|---|---|
//! | `ExecutePlan` | **no** | server-streaming | a command may write; the reattachable execution replays it instead |
//! | `ReattachExecute` | yes | server-streaming | resumes from a response id |
//! | `AnalyzePlan`, `Config`, `ArtifactStatus`, `FetchErrorDetails`, `GetStatus` | yes | unary | reads, or sets to a fixed value |
//! | `AddArtifacts` | yes | unary | re-adding the same artifact (same name, same CRC) is a no-op |
//! | `Interrupt`, `ReleaseExecute`, `ReleaseSession` | yes | unary | repeating a release or interrupt is harmless |
//! | `CloneSession` | yes | unary | the client names the new session |
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use std::time::Duration;
//! use tower::ServiceBuilder;
//! use spark_connect_retry::layer::{RetryLayer, RetryThrottle, SparkConnectLayer};
//! use spark_connect_retry::proto::spark_connect_service_client::SparkConnectServiceClient;
//! use spark_connect_retry::retrying::{PySparkRetrying, Retrying};
//!
//! let channel = tonic::transport::Endpoint::from_static("http://127.0.0.1:15002")
//!     .connect_lazy();
//! let layer = RetryLayer::spark_connect(Retrying::pyspark())
//!     .per_attempt_timeout(Duration::from_secs(30))
//!     .throttle(RetryThrottle::new(10, 0.1)?);
//! let mut client =
//!     SparkConnectServiceClient::new(ServiceBuilder::new().layer(layer).service(channel));
//! # let _ = &mut client;
//! # Ok(()) }
//! ```

pub use tonic_retry::layer::{
    CallOptions, CallStats, CallStatsHandle, ConfigWarning, HedgingPolicy, MethodConfig,
    ResponseKind, RetryLayer, RetryService, RetryStats, RetryStatsHandle, RetryThrottle,
    ServiceConfig, ServiceConfigError,
};

use crate::proto::SERVICE_NAME;

/// The Spark Connect method table for a [`RetryLayer`].
///
/// A trait so that `RetryLayer::spark_connect(..)` reads as a constructor;
/// bring it into scope with `use spark_connect_retry::layer::SparkConnectLayer`.
pub trait SparkConnectLayer {
    /// For Spark Connect: `retrying`'s policies (PySpark's classification
    /// by default) and the method table of the [module docs](self): every
    /// RPC idempotent except `ExecutePlan`; `ExecutePlan` and
    /// `ReattachExecute` server-streaming, the rest unary.
    ///
    /// ```
    /// use spark_connect_retry::layer::{RetryLayer, SparkConnectLayer};
    /// use spark_connect_retry::retrying::{PySparkRetrying, Retrying};
    ///
    /// let layer = RetryLayer::spark_connect(Retrying::pyspark());
    /// let execute = layer.method_config("/spark.connect.SparkConnectService/ExecutePlan");
    /// assert!(!execute.is_idempotent());
    /// let config = layer.method_config("/spark.connect.SparkConnectService/Config");
    /// assert!(config.is_idempotent());
    /// ```
    fn spark_connect(retrying: crate::retrying::Retrying) -> Self;
}

impl SparkConnectLayer for RetryLayer {
    fn spark_connect(retrying: crate::retrying::Retrying) -> Self {
        let unary = MethodConfig::idempotent().with_kind(ResponseKind::Unary);
        let mut layer = RetryLayer::new(retrying)
            .method(
                format!("/{SERVICE_NAME}/ExecutePlan"),
                MethodConfig::non_idempotent().with_kind(ResponseKind::ServerStreaming),
            )
            .method(
                format!("/{SERVICE_NAME}/ReattachExecute"),
                MethodConfig::idempotent().with_kind(ResponseKind::ServerStreaming),
            );
        for m in [
            "AnalyzePlan",
            "Config",
            "AddArtifacts",
            "ArtifactStatus",
            "Interrupt",
            "ReleaseExecute",
            "ReleaseSession",
            "FetchErrorDetails",
            "CloneSession",
            "GetStatus",
        ] {
            layer = layer.method(format!("/{SERVICE_NAME}/{m}"), unary.clone());
        }
        layer
    }
}
