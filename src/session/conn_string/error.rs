//! Why a connection string was rejected: errors that name the offending
//! part (scheme, host, port, path, parameter position or key) and never
//! quote a value, so a token cannot leak through them.

use std::fmt;

use super::defaults::{ENV_REMOTE, MAX_USER_AGENT_LEN};

/// Longest key quoted in an error message; longer keys are cut (keys are user text).
const MAX_QUOTED_KEY: usize = 64;

/// Which half of a `key=value` parameter an error is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ParamPart {
    /// The key, before `=`.
    Key,
    /// The value, after `=`.
    Value,
}

impl fmt::Display for ParamPart {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ParamPart::Key => "key",
            ParamPart::Value => "value",
        })
    }
}

/// Why a connection string was rejected.
///
/// Messages name the offending part but never quote a value, so a token cannot leak through
/// an error. Parameter positions (`index`) are 1-based and count the `;`-separated pieces
/// after the path, empty ones included.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ConnectionStringError {
    /// [`ConnectionString::from_env`](super::ConnectionString::from_env) found no `SPARK_REMOTE`.
    RemoteNotSet,
    /// The string does not start with `sc://`.
    Scheme,
    /// A raw `?` or `#` appeared; queries and fragments are not part of the format.
    QueryOrFragment {
        /// The character found.
        character: char,
    },
    /// The host is missing or invalid.
    Host {
        /// What is wrong with it.
        reason: &'static str,
    },
    /// The port is invalid.
    Port {
        /// What is wrong with it.
        reason: &'static str,
    },
    /// The path is not empty or `/`, or parameters do not follow a `/`.
    Path {
        /// What is wrong with it.
        reason: &'static str,
    },
    /// A parameter does not contain exactly one `=`.
    MalformedParameter {
        /// Position of the parameter.
        index: usize,
    },
    /// A parameter has an empty key (`=value`).
    EmptyKey {
        /// Position of the parameter.
        index: usize,
    },
    /// A percent-decoded key or value is not valid UTF-8.
    PercentDecoding {
        /// Position of the parameter.
        index: usize,
        /// Key or value.
        part: ParamPart,
    },
    /// A reserved parameter (`token`, `use_ssl`, `session_id`, ...) has an invalid value.
    InvalidValue {
        /// The parameter key.
        key: String,
        /// What is wrong with the value.
        reason: &'static str,
    },
    /// An unknown parameter cannot be used as a gRPC metadata key.
    InvalidMetadataKey {
        /// The key (possibly shortened).
        key: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// An unknown parameter's value cannot be used as gRPC metadata.
    InvalidMetadataValue {
        /// The key (possibly shortened).
        key: String,
        /// What is wrong with the value.
        reason: &'static str,
    },
    /// The user agent is longer than [`MAX_USER_AGENT_LEN`] once percent-encoded.
    UserAgentTooLong {
        /// Its percent-encoded length.
        encoded_len: usize,
    },
}

impl fmt::Display for ConnectionStringError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use ConnectionStringError as E;
        match self {
            E::RemoteNotSet => write!(f, "environment variable {ENV_REMOTE} is not set"),
            E::Scheme => f.write_str("connection string must start with 'sc://'"),
            E::QueryOrFragment { character } => write!(
                f,
                "connection string must not contain a raw '{character}' (no query or fragment); \
                 percent-encode it inside values"
            ),
            E::Host { reason } => write!(f, "invalid host in connection string: {reason}"),
            E::Port { reason } => write!(f, "invalid port in connection string: {reason}"),
            E::Path { reason } => write!(f, "invalid path in connection string: {reason}"),
            E::MalformedParameter { index } => write!(
                f,
                "connection string parameter #{index} is not a key=value pair with exactly one '='"
            ),
            E::EmptyKey { index } => {
                write!(f, "connection string parameter #{index} has an empty key")
            }
            E::PercentDecoding { index, part } => write!(
                f,
                "connection string parameter #{index}: the percent-decoded {part} is not valid UTF-8"
            ),
            E::InvalidValue { key, reason } => {
                write!(
                    f,
                    "invalid value for connection string parameter '{key}': {reason}"
                )
            }
            E::InvalidMetadataKey { key, reason } => write!(
                f,
                "connection string parameter '{key}' cannot be a gRPC metadata key: {reason}"
            ),
            E::InvalidMetadataValue { key, reason } => write!(
                f,
                "value of connection string parameter '{key}' cannot be gRPC metadata: {reason}"
            ),
            E::UserAgentTooLong { encoded_len } => write!(
                f,
                "user agent is {encoded_len} characters once percent-encoded; \
                 at most {MAX_USER_AGENT_LEN} are allowed"
            ),
        }
    }
}

impl std::error::Error for ConnectionStringError {}

pub(super) fn invalid_value(key: &str, reason: &'static str) -> ConnectionStringError {
    ConnectionStringError::InvalidValue {
        key: key.to_owned(),
        reason,
    }
}

/// Quotes a user-supplied key for an error: escaped and shortened.
pub(super) fn quote_key(key: &str) -> String {
    let mut out: String = key
        .chars()
        .take(MAX_QUOTED_KEY)
        .flat_map(char::escape_debug)
        .collect();
    if key.chars().count() > MAX_QUOTED_KEY {
        out.push('…');
    }
    out
}
