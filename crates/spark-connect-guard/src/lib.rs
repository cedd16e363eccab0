//! A local Spark Connect proxy that gives any client exact results through
//! faults.
//!
//! *Why:* most Spark Connect programs run a client this workspace does not
//! write. The official Rust client takes a clean stream end for the end of
//! the result (262,144 of 10,000,000 rows, no error, against a server that
//! ends a stream every 4 MiB); spark-connect-go keeps reattach off; stubs
//! generated from the protos have none; PySpark and the JVM client reattach
//! but have no stall detection. Pointed at the guard (`sc://127.0.0.1:PORT`)
//! instead of the server, any of them gets the reattach rules of
//! [`spark_connect_retry::reattach`] without changing a line.
//!
//! What it does:
//!
//! * Every `ExecutePlan` and `ReattachExecute` goes through
//!   [`ReattachLayer`](spark_connect_retry::layer::ReattachLayer):
//!   one stream to the client, carried across upstream faults and clean
//!   ends without `ResultComplete`.
//! * Every other RPC, and every header, passes through as bytes, error
//!   details included.
//! * The upstream is an `sc://` connection string, reached through
//!   `spark-connect-retry`'s connection code: its TLS, CA, token (or a
//!   [`TokenProvider`](spark_connect_retry::token::TokenProvider)
//!   given to the builder), keepalive and flow control.
//!
//! # In production
//!
//! * gRPC health checking on the guard's port ([`HealthCheck`]):
//!   `SERVING` while the upstream answers.
//! * A bounded drain ([`Guard::drain`], the program's SIGTERM): stop
//!   accepting, let streams run up to the drain timeout, then end them with
//!   UNAVAILABLE, which clients reattach on; [`Guard::abort`] stops at once.
//! * TLS and mTLS on the listening side ([`GuardTls`]), and a shared client
//!   token ([`ClientToken`]), compared in constant time and never
//!   forwarded upstream.
//! * Its own counts ([`Guard::stats`]), and with feature `metrics` a
//!   Prometheus endpoint for them (`GuardBuilder::metrics_listen`).
//!
//! # Never break a client that reattaches by itself
//!
//! PySpark and the JVM client send their own `ReattachExecute` and
//! `ReleaseExecute` when their connection to the guard breaks. The rule:
//! **the guard never releases anything upstream on its own; it forwards the
//! client's releases.** A client resumes after the last response *it*
//! received, which may be behind what the guard read from the server; only
//! the client knows how far it got, so only the client's releases are safe.
//! (A client that never releases leaves the buffer to the server's own
//! bound: Spark keeps `spark.connect.execute.reattachable.observerRetryBufferSize`,
//! 10 MiB by default, of responses already sent, and ends an abandoned
//! execution after its detach timeout.) A client's own `ReattachExecute`
//! is carried on like an `ExecutePlan`, from the position it asks for.
//!
//! # Bounded buffering
//!
//! The guard reads the next upstream response only when the client's
//! connection accepts more (HTTP/2 flow control end to end): it holds at
//! most one response plus its upstream stream window
//! (`UPSTREAM_FLOW_CONTROL`, 1 MiB) beyond what the client's connection
//! took, however slowly the client reads. That bound also keeps a client
//! that resumes after a cut inside the server's retry buffer (see
//! `UPSTREAM_FLOW_CONTROL`).
//!
//! # Loopback by default
//!
//! [`GuardBuilder`] listens on `127.0.0.1:0` unless given another address:
//! off loopback only when asked. Tokens are never logged.
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! let guard = spark_connect_guard::Guard::builder("sc://spark.example.com:15002/;use_ssl=true;token=...")
//!     .start()
//!     .await?;
//! println!("point the client at {}", guard.remote());
//! guard.shutdown().await;
//! # Ok(())
//! # }
//! ```

#![warn(missing_docs, unreachable_pub)]

mod body;
mod error;
mod front;
mod guard;
mod health;
mod io;
#[cfg(feature = "metrics")]
mod metrics;
mod stats;
mod tls;
mod token;

pub use error::GuardError;
pub use guard::{Guard, GuardBuilder};
pub use health::{HealthCheck, SPARK_CONNECT_SERVICE};
pub use stats::GuardStats;
pub use tls::GuardTls;
pub use token::ClientToken;
