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
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ConnectionStringError {
    /// [`ConnectionString::from_env`](super::ConnectionString::from_env) found no `SPARK_REMOTE`.
    #[error("environment variable {ENV_REMOTE} is not set")]
    RemoteNotSet,
    /// The string does not start with `sc://`.
    #[error("connection string must start with 'sc://'")]
    Scheme,
    /// A raw `?` or `#` appeared; queries and fragments are not part of the format.
    #[error(
        "connection string must not contain a raw '{character}' (no query or fragment); percent-encode it inside values"
    )]
    QueryOrFragment {
        /// The character found.
        character: char,
    },
    /// The host is missing or invalid.
    #[error("invalid host in connection string: {reason}")]
    Host {
        /// What is wrong with it.
        reason: &'static str,
    },
    /// The port is invalid.
    #[error("invalid port in connection string: {reason}")]
    Port {
        /// What is wrong with it.
        reason: &'static str,
    },
    /// The path is not empty or `/`, or parameters do not follow a `/`.
    #[error("invalid path in connection string: {reason}")]
    Path {
        /// What is wrong with it.
        reason: &'static str,
    },
    /// A parameter does not contain exactly one `=`.
    #[error("connection string parameter #{index} is not a key=value pair with exactly one '='")]
    MalformedParameter {
        /// Position of the parameter.
        index: usize,
    },
    /// A parameter has an empty key (`=value`).
    #[error("connection string parameter #{index} has an empty key")]
    EmptyKey {
        /// Position of the parameter.
        index: usize,
    },
    /// A percent-decoded key or value is not valid UTF-8.
    #[error("connection string parameter #{index}: the percent-decoded {part} is not valid UTF-8")]
    PercentDecoding {
        /// Position of the parameter.
        index: usize,
        /// Key or value.
        part: ParamPart,
    },
    /// A reserved parameter (`token`, `use_ssl`, `session_id`, ...) has an invalid value.
    #[error("invalid value for connection string parameter '{key}': {reason}")]
    InvalidValue {
        /// The parameter key.
        key: String,
        /// What is wrong with the value.
        reason: &'static str,
    },
    /// An unknown parameter cannot be used as a gRPC metadata key.
    #[error("connection string parameter '{key}' cannot be a gRPC metadata key: {reason}")]
    InvalidMetadataKey {
        /// The key (possibly shortened).
        key: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// An unknown parameter's value cannot be used as gRPC metadata.
    #[error("value of connection string parameter '{key}' cannot be gRPC metadata: {reason}")]
    InvalidMetadataValue {
        /// The key (possibly shortened).
        key: String,
        /// What is wrong with the value.
        reason: &'static str,
    },
    /// `result_compression` is not `none`, `zstd` or `lz4` (the value is
    /// quoted: a codec name, never a secret).
    #[error(
        "connection string parameter 'result_compression' is {value:?}: expected none, zstd or lz4"
    )]
    ResultCompression {
        /// The value given (at most its first 32 characters).
        value: String,
    },
    /// `result_batch_rows` is not `server` or a row count in
    /// `0..=2147483647` (the value is quoted: a number, never a secret).
    #[error(
        "connection string parameter 'result_batch_rows' is {value:?}: expected server or a row count in 0..=2147483647"
    )]
    ResultBatchRows {
        /// The value given (at most its first 32 characters).
        value: String,
    },
    /// The user agent is longer than 2,048 characters once percent-encoded.
    #[error(
        "user agent is {encoded_len} characters once percent-encoded; at most {MAX_USER_AGENT_LEN} are allowed"
    )]
    UserAgentTooLong {
        /// Its percent-encoded length.
        encoded_len: usize,
    },
}

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
