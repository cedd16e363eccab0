//! [`ResultBatchRows`]: how many rows Spark puts in one result batch.
//!
//! Spark's session conf `spark.sql.execution.arrow.maxRecordsPerBatch`
//! (default 10,000) cuts every result into Arrow batches of at most that
//! many rows; each batch is one ExecutePlan response with its own framing,
//! schema message, decode and bookkeeping on both ends. Larger batches
//! read a large result faster: with PySpark on Spark 4.3, 10M rows of
//! `id, id*2` took 1.63–1.83 s at 10,000 rows per batch and 1.06–1.43 s at
//! 100,000 (`docs/benchmarks.md`, "Faster by default"). So this client asks
//! for [`DEFAULT`](ResultBatchRows::DEFAULT) rows per batch when a session
//! starts, unless told otherwise:
//!
//! * the connection string's `result_batch_rows=N` or the builder's
//!   [`result_batch_rows`](crate::session::SparkSessionBuilder::result_batch_rows)
//!   ask for `N` (set like any builder config: a refusal fails the call);
//! * `result_batch_rows=server` ([`ServerDefault`](ResultBatchRows::ServerDefault))
//!   is the off switch: nothing is set, the server's value applies;
//! * a builder [`config`](crate::session::SparkSessionBuilder::config) of
//!   the conf itself is kept as given.
//!
//! The default is set apart from the builder's configs: a server that
//! refuses it (an older or another engine) answers the session's calls as
//! before, and the refusal is logged once (`warn`).
//!
//! The bytes of a batch stay capped by the server's
//! `spark.connect.grpc.arrow.maxBatchSize` (4 MiB by default, of which
//! Spark uses about 70 %): a static conf in Spark's source
//! (`SQLConf.buildStaticConf` in `Connect.scala`), fixed when the server
//! starts, which no session may set. Wide rows therefore reach the byte cap
//! before the row count; narrow rows get the row count.

use std::fmt;
use std::str::FromStr;

use super::conn_string::error::ConnectionStringError;

/// Rows per result batch to ask Spark for (the session conf
/// [`CONF`](Self::CONF)), or nothing.
///
/// ```
/// use spark_connect_retry::session::ResultBatchRows;
///
/// let r: ResultBatchRows = "250000".parse()?;
/// assert_eq!(r, ResultBatchRows::Rows(250_000));
/// assert_eq!("SERVER".parse::<ResultBatchRows>()?, ResultBatchRows::ServerDefault);
/// assert_eq!(ResultBatchRows::DEFAULT.conf_value().as_deref(), Some("100000"));
/// let err = "lots".parse::<ResultBatchRows>().unwrap_err();
/// assert_eq!(
///     err.to_string(),
///     "connection string parameter 'result_batch_rows' is \"lots\": expected server or a row count in 0..=2147483647"
/// );
/// # Ok::<(), spark_connect_retry::session::conn_string::ConnectionStringError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ResultBatchRows {
    /// Set nothing: the server's own value applies (Spark's default is
    /// 10,000). The off switch.
    ServerDefault,
    /// At most this many rows per batch. `0` is Spark's "no row limit"
    /// (batches are then cut by bytes alone).
    Rows(u32),
}

impl ResultBatchRows {
    /// The session conf it sets.
    pub const CONF: &'static str = "spark.sql.execution.arrow.maxRecordsPerBatch";

    /// What a session asks for when nothing is said: 100,000 rows
    /// (`docs/benchmarks.md`, "Faster by default").
    pub const DEFAULT: ResultBatchRows = ResultBatchRows::Rows(100_000);

    /// The conf value to set, `None` for [`ServerDefault`](Self::ServerDefault).
    pub fn conf_value(self) -> Option<String> {
        match self {
            ResultBatchRows::ServerDefault => None,
            ResultBatchRows::Rows(n) => Some(n.to_string()),
        }
    }
}

impl Default for ResultBatchRows {
    fn default() -> Self {
        Self::DEFAULT
    }
}

impl fmt::Display for ResultBatchRows {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ResultBatchRows::ServerDefault => f.write_str("server"),
            ResultBatchRows::Rows(n) => write!(f, "{n}"),
        }
    }
}

impl FromStr for ResultBatchRows {
    /// The connection string's error for `result_batch_rows`, which quotes
    /// the value (its first 32 characters: a number, never a secret).
    type Err = ConnectionStringError;

    /// `server` (any case), or a row count in `0..=2147483647` (Spark's
    /// conf is a 32-bit integer).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if s.eq_ignore_ascii_case("server") {
            return Ok(ResultBatchRows::ServerDefault);
        }
        match s.parse::<u32>() {
            Ok(n) if i32::try_from(n).is_ok() => Ok(ResultBatchRows::Rows(n)),
            _ => Err(ConnectionStringError::ResultBatchRows {
                value: s.chars().take(MAX_QUOTED).collect(),
            }),
        }
    }
}

/// Longest value quoted in the error (it is user text).
const MAX_QUOTED: usize = 32;
