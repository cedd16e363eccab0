//! The embedded Spark Connect server: sessions, reattachable executions with
//! a retry buffer, releases, graceful stream ends and the fault script.
//!
//! One file per concern, each depending only on those below it:
//!
//! * `service`: the gRPC service, dispatching each RPC to its handler;
//! * `executions`: the ExecutePlan, ReattachExecute and ReleaseExecute RPCs;
//!   `session_rpcs`: AnalyzePlan, Config, Interrupt, ReleaseSession and
//!   FetchErrorDetails; `artifacts`: AddArtifacts and ArtifactStatus;
//! * `call`: what every RPC does around its handler (call counters, the
//!   metadata log, auth, the fault script);
//! * `sender`: the task that streams an execution to one attached client;
//!   `producer`: the task that runs a plan; `buffer`: an execution and its
//!   response buffer;
//! * `upload`: the rules of one upload stream (pure); `store`: a session's
//!   artifacts and how a finished upload enters them (pure);
//! * `tokens`: which bearer tokens are accepted, and when they rotate;
//! * `state`: the state shared by all of them (sessions, executions, errors);
//!   `settings`: the server's settings and their defaults; `conf_defaults`:
//!   the Spark confs it answers for keys a session never set;
//! * `codec`: compression both ways (result batches by the session's
//!   codec conf, compressed plans);
//! * `handle`: [`TestServer`], the public handle, and what it reports;
//!   `builder`: [`TestServerBuilder`].

mod artifacts;
mod buffer;
mod builder;
mod call;
mod codec;
mod conf_defaults;
mod executions;
mod handle;
mod producer;
mod sender;
mod service;
mod session_rpcs;
mod settings;
mod state;
mod store;
mod tokens;
mod upload;

pub use builder::TestServerBuilder;
pub use handle::{BufferStats, CallCounts, TestServer};
pub use settings::{
    DEFAULT_MAX_CHUNK_BYTES, DEFAULT_MAX_STREAM_DURATION, DEFAULT_RETRY_BUFFER_BYTES,
    DEFAULT_ROWS_PER_BATCH, DEFAULT_SPARK_VERSION,
};
pub use state::{RecordedCall, UploadCall};
pub use tokens::TokenRotation;
