//! [`GuardError`]: why a guard could not start. A leaf: every part of the
//! guard (TLS, the client token, health checks, metrics) returns it.

use std::net::SocketAddr;

use spark_connect_retry::session::SparkError;

/// Why a guard could not start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum GuardError {
    /// The upstream connection string or its options are unusable.
    #[error("upstream: {0}")]
    Upstream(#[from] SparkError),
    /// The listen address could not be bound.
    #[error("cannot listen on {addr}: {source}")]
    Listen {
        /// The address asked for.
        addr: SocketAddr,
        /// The socket's error.
        #[source]
        source: std::io::Error,
    },
    /// A TLS certificate, key or CA is unusable (the key's bytes are never
    /// shown).
    #[error("TLS {what} ({source_name}): {reason}")]
    Tls {
        /// Which part: `certificate`, `private key`, `client CA`,
        /// `configuration`.
        what: &'static str,
        /// The file it came from, or `the PEM given`.
        source_name: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A file the guard needs could not be read.
    #[error("{what} {path}: {reason}")]
    File {
        /// What the file is for.
        what: &'static str,
        /// Its path.
        path: String,
        /// The error reading it.
        reason: String,
    },
    /// An option has a value the guard cannot use.
    #[error("{option}: {reason}")]
    InvalidOption {
        /// The option, as the builder and the CLI name it.
        option: &'static str,
        /// What is wrong with its value.
        reason: &'static str,
    },
}
