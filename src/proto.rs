//! The Spark Connect protocol (package `spark.connect`), generated from
//! `proto/` at build time.
#![allow(missing_docs, unreachable_pub, clippy::all, clippy::pedantic)]

// The generated package `spark.connect`, private so that each message has
// one public path: `proto::X`.
mod spark {
    pub mod connect {
        tonic::include_proto!("spark.connect");
    }
}
pub use spark::connect::*;

/// The gRPC service's full name, as OpenTelemetry's `rpc.service` spells it.
pub const SERVICE_NAME: &str = "spark.connect.SparkConnectService";
