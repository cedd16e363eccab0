//! [`ResultCompression`]: asking Spark to compress result batches.
//!
//! Since Spark 4.1 (SPARK-54134) the session conf
//! `spark.sql.execution.arrow.compression.codec` makes the server compress
//! every Arrow batch it sends. Over a thin link that is most of the time of
//! a large query; on loopback it only adds CPU on both ends. One setting,
//! in the connection string (`result_compression=zstd`) or the builder
//! ([`result_compression`](crate::session::SparkSessionBuilder::result_compression)),
//! sets the conf when the session starts, so a program turns it on in one
//! place. Results decode the same whatever set the conf (this setting, a
//! `Config` call, `SET`, the server's defaults).

use std::fmt;
use std::str::FromStr;

use super::conn_string::error::ConnectionStringError;

/// The codec Spark compresses result batches with (the session conf
/// [`CONF`](Self::CONF)).
///
/// When it pays: when the link, not the server, is the bottleneck (a WAN,
/// a VPN, a cloud egress at 100 Mbit/s or less). Ask for `Zstd`. On Spark
/// 4.3 the server's `lz4` is very slow: PySpark read 200k rows in 78.6 s
/// with `lz4`, 0.27 s with `zstd` and 3.1 s uncompressed (about 300× the
/// time of `zstd`), so `Lz4` is here only because Spark offers it.
///
/// ```
/// use spark_connect_retry::session::ResultCompression;
///
/// let c: ResultCompression = "ZSTD".parse()?;
/// assert_eq!((c, c.as_str()), (ResultCompression::Zstd, "zstd"));
/// let err = "snappy".parse::<ResultCompression>().unwrap_err();
/// assert_eq!(
///     err.to_string(),
///     "connection string parameter 'result_compression' is \"snappy\": expected none, zstd or lz4"
/// );
/// # Ok::<(), spark_connect_retry::session::conn_string::ConnectionStringError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ResultCompression {
    /// Uncompressed batches (Spark's default).
    None,
    /// Zstandard (level: the conf `spark.sql.execution.arrow.compression.zstd.level`).
    Zstd,
    /// LZ4 frames: slow on Spark 4.3's server side (see the type's docs).
    Lz4,
}

impl ResultCompression {
    /// The session conf it sets.
    pub const CONF: &'static str = "spark.sql.execution.arrow.compression.codec";

    /// The conf value, as Spark spells it (`none`, `zstd`, `lz4`).
    pub fn as_str(self) -> &'static str {
        match self {
            ResultCompression::None => "none",
            ResultCompression::Zstd => "zstd",
            ResultCompression::Lz4 => "lz4",
        }
    }
}

impl fmt::Display for ResultCompression {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for ResultCompression {
    /// The connection string's error for `result_compression`, which
    /// quotes the value (its first 32 characters: a codec name, never a
    /// secret).
    type Err = ConnectionStringError;

    /// `none`, `zstd` or `lz4`, any case (Spark's values).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.to_ascii_lowercase().as_str() {
            "none" => Ok(ResultCompression::None),
            "zstd" => Ok(ResultCompression::Zstd),
            "lz4" => Ok(ResultCompression::Lz4),
            _ => Err(ConnectionStringError::ResultCompression {
                value: s.chars().take(MAX_QUOTED).collect(),
            }),
        }
    }
}

/// Longest value quoted in the error (it is user text).
const MAX_QUOTED: usize = 32;
