//! The Config RPC: configs set by the caller at run time
//! ([`SparkSession::config_set`] and friends) and the builder's configs
//! ([`SparkSessionBuilder::config`](super::SparkSessionBuilder::config)).
//!
//! A Spark user sets confs in two places: on the builder, before the
//! session exists (`SparkSession.builder.config(k, v)` in PySpark), and on
//! the running session (`spark.conf.set`). Both live in the server-side
//! session, so both are lost when it is (a server restart). The builder's
//! are therefore kept by the client and set again on every server-side
//! session before its first call: at the start, and after each renewal of
//! a stale session. Those set at run time are not replayed: they may depend
//! on what the lost session held.

use super::builder_configs::set_op;
use super::error::SparkError;
use super::spark::SparkSession;
use crate::proto;
use crate::proto::config_request::operation::OpType;

impl SparkSession {
    /// A Config call on the current session (renewed if stale).
    async fn config(&self, op: OpType) -> Result<proto::ConfigResponse, SparkError> {
        self.unary(
            self.options().deadlines.config,
            |g| self.config_request(g, &op),
            |mut c, r| async move { c.config(r).await },
        )
        .await
    }

    /// Set Spark configuration values.
    pub async fn config_set(&self, pairs: &[(&str, &str)]) -> Result<(), SparkError> {
        self.config(set_op(pairs.iter().copied())).await.map(drop)
    }

    /// Get configuration values (`None` where unset and without a default).
    pub async fn config_get(&self, keys: &[&str]) -> Result<Vec<Option<String>>, SparkError> {
        let keys: Vec<String> = keys.iter().map(|k| (*k).to_owned()).collect();
        let resp = self
            .config(OpType::GetOption(proto::config_request::GetOption {
                keys: keys.clone(),
            }))
            .await?;
        Ok(keys
            .iter()
            .map(|k| {
                resp.pairs
                    .iter()
                    .find(|p| &p.key == k)
                    .and_then(|p| p.value.clone())
            })
            .collect())
    }

    /// Unset configuration values.
    pub async fn config_unset(&self, keys: &[&str]) -> Result<(), SparkError> {
        let keys = keys.iter().map(|k| (*k).to_owned()).collect();
        self.config(OpType::Unset(proto::config_request::Unset { keys }))
            .await
            .map(drop)
    }
}
