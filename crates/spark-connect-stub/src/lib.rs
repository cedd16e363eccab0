//! A Spark Connect client stub generated from the protos with messages of
//! its own (`spark.connect.*`), as any program's stub is.
//!
//! *Why:* the reattach layer and the guard promise to work under any
//! generated stub, not only under this workspace's session; their tests use
//! this one, which shares no type with `spark-connect-retry`.

#![warn(unreachable_pub)]
#![allow(missing_docs, clippy::all, clippy::pedantic)]

/// The generated `spark.connect` package: messages and the client stub.
pub mod spark {
    pub mod connect {
        tonic::include_proto!("spark.connect");
    }
}
