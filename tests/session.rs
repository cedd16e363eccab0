//! `SparkSession` against the embedded fault-injecting server: queries,
//! errors, renewals, resumed queries, uploads and artifacts, message limits,
//! a server that goes away, and the README's quick start.

mod support;

// The theme's tests, one file each: tests/session/*.rs.
mod session {
    mod api;
    mod artifacts;
    mod embedded;
    mod errors;
    mod message_size;
    mod metrics;
    mod params;
    mod readme;
    mod renewal;
    mod resume;
    mod server_down;
    mod upload;
}
