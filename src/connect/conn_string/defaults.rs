//! The defaults, limits and environment variable names of a connection
//! string: constants the parser, its errors and users all read, in a leaf.

/// Default Spark Connect port.
pub(crate) const DEFAULT_PORT: u16 = 15002;

/// Default maximum gRPC message size: 128 MiB, the Spark client default.
pub(crate) const DEFAULT_MAX_MESSAGE_SIZE: usize = 128 * 1024 * 1024;

/// Default user agent of this client (`_SPARK_CONNECT_PYTHON` and `_SPARK_CONNECT_SCALA`
/// upstream).
pub(crate) const DEFAULT_USER_AGENT: &str = "_SPARK_CONNECT_RUST";

/// Spark Connect protocol version this crate speaks, reported in [`ConnectionString::client_type`](super::ConnectionString::client_type).
pub(crate) const SPARK_VERSION: &str = "4.3.0";

/// Longest accepted user agent, counted after percent-encoding (PySpark's limit).
pub(crate) const MAX_USER_AGENT_LEN: usize = 2048;

/// Environment variable holding the default connection string (read by
/// [`ConnectionString::from_env`](super::ConnectionString::from_env)).
pub(crate) const ENV_REMOTE: &str = "SPARK_REMOTE";
/// Environment variable holding the fallback token.
pub(crate) const ENV_TOKEN: &str = "SPARK_CONNECT_AUTHENTICATE_TOKEN";
/// Environment variable holding the fallback user agent.
pub(crate) const ENV_USER_AGENT: &str = "SPARK_CONNECT_USER_AGENT";
/// First environment variable holding the fallback user id.
pub(crate) const ENV_SPARK_USER: &str = "SPARK_USER";
/// Second environment variable holding the fallback user id.
pub(crate) const ENV_USER: &str = "USER";
