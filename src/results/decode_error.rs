//! [`ResultDecodeError`]: a result batch this client cannot turn into
//! Arrow arrays, said in the user's terms.
//!
//! arrow-rs reports a bad buffer as a bare message (`Invalid UTF8 sequence
//! at string index 0`, `Unknown frame descriptor`), without the column or
//! the batch. Someone holding a failed 2M-row query needs to know which
//! column of which batch, and what to change (ask for another codec, read
//! the column as bytes). Each variant names the batch by the result row it
//! starts at, which is the same on a reattached or resumed stream.

/// A result batch that could not be decoded; it names the batch, and the
/// codec and column when they are known.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ResultDecodeError {
    /// The batch is compressed with a codec this client does not decode
    /// (it decodes Arrow's `ZSTD` and `LZ4_FRAME`, all Spark sends).
    #[error(
        "[ARROW_CODEC_UNSUPPORTED] the result batch at row {batch_start} is compressed with {codec}, which this client cannot decode (it reads ZSTD and LZ4_FRAME); set spark.sql.execution.arrow.compression.codec to zstd or none"
    )]
    UnsupportedCodec {
        /// The result row the batch starts at.
        batch_start: u64,
        /// The codec as the batch names it, e.g. `CompressionType(7)`.
        codec: String,
    },
    /// A compressed buffer of the batch is corrupt: it does not decompress,
    /// or not to the length it states.
    #[error(
        "[ARROW_CORRUPT_BUFFER] the result batch at row {batch_start}{}: a {codec} buffer is corrupt: {reason}",
        column_suffix(column.as_deref())
    )]
    CorruptBuffer {
        /// The result row the batch starts at.
        batch_start: u64,
        /// The codec (`ZSTD` or `LZ4_FRAME`).
        codec: String,
        /// The column the buffer belongs to, when known.
        column: Option<String>,
        /// What is wrong, as the decoder said it.
        reason: String,
    },
    /// A STRING value is not UTF-8. Spark strings are bytes
    /// (`CAST(X'00FF01' AS STRING)` is a valid Spark value) but an Arrow
    /// `Utf8` array must hold UTF-8; `CAST(col AS BINARY)` reads the bytes.
    #[error(
        "[STRING_NOT_UTF8] column `{column}`{}: a STRING value is not UTF-8 (Spark strings are bytes); select CAST({column} AS BINARY) to read its bytes",
        row_suffix(*row)
    )]
    NotUtf8 {
        /// The result row the batch starts at.
        batch_start: u64,
        /// The column.
        column: String,
        /// The result row of the first such value, when the column is a
        /// top-level STRING (inside an array or struct, only the column is
        /// named).
        row: Option<u64>,
    },
}

fn column_suffix(column: Option<&str>) -> String {
    column
        .map(|c| format!(", column `{c}`"))
        .unwrap_or_default()
}

fn row_suffix(row: Option<u64>) -> String {
    row.map(|r| format!(", row {r}")).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_name_what_they_know() {
        let e = ResultDecodeError::CorruptBuffer {
            batch_start: 8192,
            codec: "ZSTD".into(),
            column: Some("x".into()),
            reason: "Unknown frame descriptor".into(),
        };
        assert_eq!(
            e.to_string(),
            "[ARROW_CORRUPT_BUFFER] the result batch at row 8192, column `x`: a ZSTD buffer is corrupt: Unknown frame descriptor"
        );
        let e = ResultDecodeError::NotUtf8 {
            batch_start: 0,
            column: "s".into(),
            row: Some(3),
        };
        assert!(
            e.to_string()
                .starts_with("[STRING_NOT_UTF8] column `s`, row 3:"),
            "{e}"
        );
    }
}
