//! The [`ReattachLayer`]'s parts: which calls become reattachable
//! executions (`service`), the caller's bytes read and written without
//! re-encoding (`wire`, `frame`), the driver's transport on raw bytes
//! (`raw`), and the body the caller reads (`body`). What it does is in the
//! [`layer` module docs](super). `released` notes the executions the
//! caller released by itself, so that no driver sends them again.

mod body;
mod frame;
mod raw;
mod released;
mod service;
mod wire;

pub use service::{ReattachLayer, ReattachService};

/// The gRPC paths the layer handles.
const EXECUTE_PLAN: &str = "/spark.connect.SparkConnectService/ExecutePlan";
const REATTACH_EXECUTE: &str = "/spark.connect.SparkConnectService/ReattachExecute";
const RELEASE_EXECUTE: &str = "/spark.connect.SparkConnectService/ReleaseExecute";

/// Who sends the `ReleaseExecute`s of an execution the layer carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Releases {
    /// The layer, as the session does.
    #[default]
    Own,
    /// Only the caller: the layer releases nothing, so a caller that
    /// reattaches by itself finds every response it has not released.
    CallerOnly,
}
