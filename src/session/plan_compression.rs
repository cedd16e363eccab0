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

use std::sync::atomic::Ordering;

use prost::Message;

use super::error::SparkError;
use super::plan_codec::{
    ALGORITHM_CONF, CANNOT_PARSE, MIN_PLAN_BYTES, THRESHOLD_CONF, compress, threshold,
};
use super::spark::SparkSession;
use crate::proto::Plan;

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
