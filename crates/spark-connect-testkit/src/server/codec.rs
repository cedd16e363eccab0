//! Compression both ways, as Spark 4.1+ does it. Result batches
//! (SPARK-54134): when a session's `spark.sql.execution.arrow.compression.codec`
//! is `zstd` or `lz4`, each Arrow IPC stream's buffers are compressed (the
//! IPC format's own body compression). Plans (SPARK-54194): a
//! `Plan.compressed_operation` is a zstd-compressed relation or command.
//! A test double must do both, or a client's handling of them is only ever
//! tested against Spark.

use arrow_ipc::CompressionType;
use arrow_ipc::reader::StreamReader;
use arrow_ipc::writer::{IpcWriteOptions, StreamWriter};

use prost::Message;
use spark_connect_retry::proto;

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

/// The largest plan a compressed plan may expand to (the server's message limit).
const MAX_PLAN_BYTES: usize = super::settings::MAX_MESSAGE_BYTES;

/// The plain plan inside a compressed one, or Spark's
/// `CONNECT_INVALID_PLAN.CANNOT_PARSE` when it cannot be read (or when this
/// server is set not to read compressed plans).
pub(crate) fn decompress_plan(
    op: &proto::plan::CompressedOperation,
    readable: bool,
) -> Result<proto::Plan, SparkException> {
    use proto::plan::compressed_operation::OpType;
    let cannot_parse = |why: &str| {
        SparkException::new(
            "CONNECT_INVALID_PLAN.CANNOT_PARSE",
            "42K0J",
            format!("[CONNECT_INVALID_PLAN.CANNOT_PARSE] The plan cannot be parsed: {why}"),
        )
        .with_parameter("errorMsg", why)
    };
    if !readable {
        return Err(cannot_parse("compressed plans are not supported"));
    }
    if op.compression_codec != proto::CompressionCodec::Zstd as i32 {
        return Err(cannot_parse("unknown compression codec"));
    }
    let bytes = zstd::bulk::decompress(&op.data, MAX_PLAN_BYTES)
        .map_err(|e| cannot_parse(&format!("zstd: {e}")))?;
    let op_type = match OpType::try_from(op.op_type) {
        Ok(OpType::Relation) => {
            proto::Relation::decode(bytes.as_slice()).map(proto::plan::OpType::Root)
        }
        Ok(OpType::Command) => {
            proto::Command::decode(bytes.as_slice()).map(proto::plan::OpType::Command)
        }
        _ => return Err(cannot_parse("unknown operation type")),
    }
    .map_err(|e| cannot_parse(&e.to_string()))?;
    Ok(proto::Plan {
        op_type: Some(op_type),
    })
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
