//! # spark-connect-retry
//!
//! Retries and reattachable executions for [Spark Connect] over [tonic].
//!
//! [Spark Connect]: https://spark.apache.org/docs/latest/spark-connect-overview.html
#![warn(missing_docs)]
#![cfg_attr(docsrs, feature(doc_cfg))]

pub mod proto {
    //! The Spark Connect protocol (package `spark.connect`), generated from
    //! `proto/` at build time.
    #![allow(missing_docs, clippy::all, clippy::pedantic)]

    /// `spark.*` packages.
    pub mod spark {
        /// `spark.connect`: messages and the `SparkConnectService` client and server.
        pub mod connect {
            tonic::include_proto!("spark.connect");
        }
    }
    pub use spark::connect::*;
}

pub mod layer;
pub mod policy;
pub mod reattach;
pub mod retrying;
pub mod session;
pub mod status;
#[cfg(feature = "testing")]
pub mod testing;
