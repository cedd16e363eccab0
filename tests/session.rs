//! `SparkSession` against the embedded fault-injecting server: queries,
//! errors and what retries log, renewals, resumed queries, uploads and
//! artifacts, message limits, a server that goes away, give-ups that say
//! what they tried, tokens that expire, and the README's quick start.

mod support;

// The theme's tests, one file each: tests/session/*.rs.
mod session {
    mod api;
    mod artifacts;
    mod batch_rows;
    mod compression;
    mod connector;
    mod embedded;
    mod errors;
    mod give_up;
    mod logging;
    mod message_size;
    mod metrics;
    mod params;
    mod readme;
    mod renewal;
    mod resume;
    mod server_down;
    mod tokens;
    mod upload;
}
