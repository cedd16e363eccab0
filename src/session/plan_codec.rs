//! The pure half of plan compression (SPARK-54194): the confs that turn it
//! on, the decision and the compressing, and the session's state; the
//! session's use of them is `plan_compression`.

use std::sync::atomic::{AtomicBool, AtomicU64};

use prost::Message;

use crate::proto::plan::{self, CompressedOperation, compressed_operation};
use crate::proto::{CompressionCodec, Plan};

/// The server's threshold, in bytes (unset or negative: off).
pub(super) const THRESHOLD_CONF: &str = "spark.connect.session.planCompression.threshold";
/// The server's algorithm (`ZSTD` or `NONE`).
pub(super) const ALGORITHM_CONF: &str = "spark.connect.session.planCompression.defaultAlgorithm";
/// Plans smaller than this are never compressed (`plan_compression`).
pub(super) const MIN_PLAN_BYTES: usize = 1024;
/// The error class of a plan the server cannot read.
pub(super) const CANNOT_PARSE: &str = "CONNECT_INVALID_PLAN.CANNOT_PARSE";
/// zstd's level (python-zstandard's default, which PySpark uses).
const LEVEL: i32 = 3;

/// A session's plan compression: the server's threshold (read once) and
/// whether the server refused a compressed plan.
#[derive(Debug, Default)]
pub(crate) struct PlanCompression {
    /// `Some(None)`: read, off.
    pub(super) threshold: tokio::sync::OnceCell<Option<usize>>,
    pub(super) refused: AtomicBool,
    pub(super) sent: AtomicU64,
}

/// The threshold the server's confs give, as PySpark reads them: on only
/// for a non-negative threshold and the algorithm `ZSTD`.
pub(super) fn threshold(threshold: Option<&str>, algorithm: Option<&str>) -> Option<usize> {
    let t: i64 = threshold?.trim().parse().ok()?;
    let t = usize::try_from(t).ok()?;
    (algorithm == Some("ZSTD")).then_some(t)
}

/// `plan` compressed, when it is a relation or a command larger than
/// `threshold` bytes and compressing makes it smaller.
pub(super) fn compress(plan: &Plan, threshold: usize) -> Option<Plan> {
    use compressed_operation::OpType;
    let (bytes, op_type) = match plan.op_type.as_ref()? {
        plan::OpType::Root(r) => (r.encode_to_vec(), OpType::Relation),
        plan::OpType::Command(c) => (c.encode_to_vec(), OpType::Command),
        plan::OpType::CompressedOperation(_) => return None,
    };
    if bytes.len() <= threshold {
        return None;
    }
    let data = zstd::bulk::compress(&bytes, LEVEL).ok()?;
    if data.len() >= bytes.len() {
        return None;
    }
    Some(Plan {
        op_type: Some(plan::OpType::CompressedOperation(CompressedOperation {
            data,
            op_type: op_type as i32,
            compression_codec: CompressionCodec::Zstd as i32,
        })),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::{Relation, Sql, relation};

    fn sql_plan(text: &str) -> Plan {
        Plan {
            op_type: Some(plan::OpType::Root(Relation {
                rel_type: Some(relation::RelType::Sql(Sql {
                    query: text.to_owned(),
                    ..Default::default()
                })),
                ..Default::default()
            })),
        }
    }

    #[test]
    fn the_confs_turn_it_on_as_pyspark_reads_them() {
        assert_eq!(threshold(Some("1024"), Some("ZSTD")), Some(1024));
        assert_eq!(threshold(Some("0"), Some("ZSTD")), Some(0));
        assert_eq!(threshold(Some("-1"), Some("ZSTD")), None);
        assert_eq!(threshold(Some("1024"), Some("NONE")), None);
        assert_eq!(threshold(None, Some("ZSTD")), None);
        assert_eq!(threshold(Some("lots"), Some("ZSTD")), None);
    }

    #[test]
    fn larger_plans_go_compressed_only_when_smaller() {
        let text = format!("SELECT {} AS x", vec!["1"; 2000].join(" + "));
        let plan = sql_plan(&text);
        let Some(c) = compress(&plan, 100) else {
            panic!("compressed")
        };
        let Some(plan::OpType::CompressedOperation(op)) = &c.op_type else {
            panic!("{c:?}")
        };
        assert_eq!(op.op_type, compressed_operation::OpType::Relation as i32);
        assert_eq!(op.compression_codec, CompressionCodec::Zstd as i32);
        let back = zstd::bulk::decompress(&op.data, 1 << 20).unwrap();
        let original = match &plan.op_type {
            Some(plan::OpType::Root(r)) => r.clone(),
            _ => unreachable!(),
        };
        assert_eq!(Relation::decode(back.as_slice()).unwrap(), original);
        // At or under the threshold: plain.
        assert!(compress(&plan, plan.encoded_len()).is_none());
        // Not smaller once compressed (a plan of a few bytes, past a zero
        // threshold): plain.
        let tiny = sql_plan("x");
        assert!(tiny.encoded_len() < 10);
        assert!(compress(&tiny, 0).is_none());
    }
}
