//! [`SparkConnectLayer`]: Spark Connect's method table for a
//! [`RetryLayer`], written once (the table is in the [module docs](super)).

use tonic_retry::layer::{MethodConfig, ResponseKind, RetryLayer};

use crate::proto::SERVICE_NAME;

/// The Spark Connect method table for a [`RetryLayer`].
///
/// A trait so that `RetryLayer::spark_connect(..)` reads as a constructor;
/// bring it into scope with `use spark_connect_retry::layer::SparkConnectLayer`.
pub trait SparkConnectLayer {
    /// For Spark Connect: `retrying`'s policies (PySpark's classification
    /// by default) and the method table of the [module docs](super): every
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
