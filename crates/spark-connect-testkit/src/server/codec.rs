//! Compressed result batches, as Spark 4.1+ sends them (SPARK-54134): when
//! a session's `spark.sql.execution.arrow.compression.codec` is `zstd` or
//! `lz4`, each Arrow IPC stream's buffers are compressed (the IPC format's
//! own body compression). A test double must do it too, or a client's
//! decoding of compressed results is only ever tested against Spark.

use arrow_ipc::CompressionType;
use arrow_ipc::reader::StreamReader;
use arrow_ipc::writer::{IpcWriteOptions, StreamWriter};

use crate::error::SparkException;
use crate::local::arrow_failed;

/// The session conf that names the codec (Spark's).
pub(crate) const CODEC_CONF: &str = "spark.sql.execution.arrow.compression.codec";

/// The codec a conf value names: `None` for `none` (or unset), an error
/// naming the value for anything else Spark does not accept.
pub(crate) fn codec(value: Option<&str>) -> Result<Option<CompressionType>, SparkException> {
    match value.map(str::to_ascii_lowercase).as_deref() {
        None | Some("none") => Ok(None),
        Some("zstd") => Ok(Some(CompressionType::ZSTD)),
        Some("lz4") => Ok(Some(CompressionType::LZ4_FRAME)),
        Some(other) => Err(SparkException::new(
            "INVALID_CONF_VALUE.OUT_OF_RANGE_OF_OPTIONS",
            "22022",
            format!(
                "The value '{other}' in the config \"{CODEC_CONF}\" is invalid. It should be one of 'zstd', 'lz4', 'none'."
            ),
        )),
    }
}

/// `ipc` (one uncompressed Arrow IPC stream) written again with its
/// buffers compressed by `codec`.
pub(crate) fn compress(ipc: &[u8], codec: CompressionType) -> Result<Vec<u8>, SparkException> {
    let reader = StreamReader::try_new(ipc, None).map_err(arrow_failed)?;
    let options = IpcWriteOptions::default()
        .try_with_compression(Some(codec))
        .map_err(arrow_failed)?;
    let schema = reader.schema();
    let mut writer =
        StreamWriter::try_new_with_options(Vec::new(), &schema, options).map_err(arrow_failed)?;
    for batch in reader {
        writer
            .write(&batch.map_err(arrow_failed)?)
            .map_err(arrow_failed)?;
    }
    writer.finish().map_err(arrow_failed)?;
    writer.into_inner().map_err(arrow_failed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn conf_values_as_spark_reads_them() {
        assert_eq!(codec(None).unwrap(), None);
        assert_eq!(codec(Some("NONE")).unwrap(), None);
        assert_eq!(codec(Some("zstd")).unwrap(), Some(CompressionType::ZSTD));
        assert_eq!(
            codec(Some("LZ4")).unwrap(),
            Some(CompressionType::LZ4_FRAME)
        );
        let err = codec(Some("snappy")).unwrap_err();
        assert!(err.to_string().contains("'snappy'"), "{err}");
    }
}
