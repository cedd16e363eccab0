//! Compressed plans (SPARK-54194), as PySpark 4.3 sends them.
//!
//! A plan with a large local relation or a long SQL text costs upload time
//! on a thin link, and Spark 4.1+ reads a plan compressed with zstd
//! (`Plan.compressed_operation`). The server says how large a plan must be
//! and with what (the session confs [`THRESHOLD_CONF`] and
//! [`ALGORITHM_CONF`]); the client reads them once per session and, like
//! PySpark's `_try_compress_and_set_plan`, sends a relation or command
//! larger than the threshold compressed, only when that is smaller. A
//! server that does not know the confs (Spark 4.0, other servers) gets
//! plain plans, as before. A server that fails to read a compressed plan
//! (`CONNECT_INVALID_PLAN.CANNOT_PARSE`) gets plain plans for the rest of
//! the session; unlike PySpark, which fails that one query, the refused
//! ExecutePlan is sent again, plain (nothing ran).
//!
//! One difference, on purpose: plans under [`MIN_PLAN_BYTES`] are sent
//! plain without asking the server. zstd saves a few bytes on them at best,
//! and reading the confs is a round trip before the session's first query.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use prost::Message;

use super::error::SparkError;
use super::spark::SparkSession;
use crate::proto::plan::{self, CompressedOperation, compressed_operation};
use crate::proto::{CompressionCodec, Plan};

/// The server's threshold, in bytes (unset or negative: off).
pub(super) const THRESHOLD_CONF: &str = "spark.connect.session.planCompression.threshold";
/// The server's algorithm (`ZSTD` or `NONE`).
pub(super) const ALGORITHM_CONF: &str = "spark.connect.session.planCompression.defaultAlgorithm";
/// Plans smaller than this are never compressed (module docs).
pub(super) const MIN_PLAN_BYTES: usize = 1024;
/// The error class of a plan the server cannot read.
const CANNOT_PARSE: &str = "CONNECT_INVALID_PLAN.CANNOT_PARSE";
/// zstd's level (python-zstandard's default, which PySpark uses).
const LEVEL: i32 = 3;

/// A session's plan compression: the server's threshold (read once) and
/// whether the server refused a compressed plan.
#[derive(Debug, Default)]
pub(super) struct PlanCompression {
    /// `Some(None)`: read, off.
    threshold: tokio::sync::OnceCell<Option<usize>>,
    refused: AtomicBool,
    sent: AtomicU64,
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

impl SparkSession {
    /// The plan to send for `plan` (module docs), and whether it is compressed.
    pub(crate) async fn plan_to_send(&self, plan: Plan) -> (Plan, bool) {
        let pc = self.plan_compression();
        if pc.refused.load(Ordering::Relaxed) || plan.encoded_len() < MIN_PLAN_BYTES {
            return (plan, false);
        }
        let threshold = *pc
            .threshold
            .get_or_init(|| async {
                match self.config_get(&[THRESHOLD_CONF, ALGORITHM_CONF]).await {
                    Ok(v) => threshold(v[0].as_deref(), v[1].as_deref()),
                    Err(e) => {
                        tracing::debug!(error = %e, "plan compression off: the server's confs could not be read");
                        None
                    }
                }
            })
            .await;
        match threshold.and_then(|t| compress(&plan, t)) {
            Some(compressed) => {
                pc.sent.fetch_add(1, Ordering::Relaxed);
                (compressed, true)
            }
            None => (plan, false),
        }
    }

    /// After a compressed plan failed with `err`: whether the server could
    /// not read it, in which case plans go plain for the rest of the session.
    pub(crate) fn compressed_plan_refused(&self, err: &SparkError) -> bool {
        let refused = err.server_error().and_then(|e| e.error_class()) == Some(CANNOT_PARSE);
        if refused {
            tracing::info!(
                "plan compression off for the session: the server could not read a compressed plan"
            );
            self.plan_compression()
                .refused
                .store(true, Ordering::Relaxed);
        }
        refused
    }

    /// How many plans this session has sent compressed (SPARK-54194: the
    /// server's `spark.connect.session.planCompression.threshold` and
    /// `…defaultAlgorithm=ZSTD` turn it on; plans under 1 KiB never are).
    pub fn plans_compressed(&self) -> u64 {
        self.plan_compression().sent.load(Ordering::Relaxed)
    }
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
