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

use super::error::SparkError;
use super::generation::Generation;
use super::spark::SparkSession;
use crate::proto;
use crate::proto::config_request::operation::OpType;
use crate::transport::SparkClient;

impl SparkSession {
    /// A Config request with operation `op` for generation `g`.
    fn config_request(&self, g: &Generation, op: &OpType) -> proto::ConfigRequest {
        proto::ConfigRequest {
            session_id: g.session_id().to_owned(),
            client_observed_server_side_session_id: g.observed(),
            user_context: self.user_context(),
            operation: Some(proto::config_request::Operation {
                op_type: Some(op.clone()),
            }),
            client_type: self.client_type_field(),
        }
    }

    /// A Config call on the current session (renewed if stale).
    async fn config(&self, op: OpType) -> Result<proto::ConfigResponse, SparkError> {
        self.unary(
            self.options().deadlines.config,
            |g| self.config_request(g, &op),
            |mut c, r| async move { c.config(r).await },
        )
        .await
    }

    /// Sets the builder's configs on generation `g`, once, before its first
    /// call. Not silent, unlike PySpark's builder: a conf the server refuses
    /// (a static one, a bad value) fails the call with Spark's error naming
    /// it, and is tried again on the next call.
    pub(super) async fn apply_builder_configs(&self, g: &Generation) -> Result<(), SparkError> {
        let configs = &self.options().configs.0;
        if configs.is_empty() {
            return Ok(());
        }
        g.configured
            .get_or_try_init(|| async {
                let op = set_op(configs.iter().map(|(k, v)| (k.as_str(), v.as_str())));
                let req = self.config_request(g, &op);
                let call = |mut c: SparkClient, r| async move { c.config(r).await };
                let result = match self.send(self.options().deadlines.config, req, &call).await {
                    Ok(resp) => self.verify(g, &resp.session_id, &resp.server_side_session_id),
                    Err(status) => Err(self.call_error(status, Some("Config"), None, g).await),
                };
                result.inspect_err(|e| {
                    self.note_failure(g, e, !matches!(e, SparkError::SessionChanged { .. }));
                })
            })
            .await
            .map(drop)
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

/// A Config `Set` of these pairs (not silent: refusals are errors).
fn set_op<'a>(pairs: impl Iterator<Item = (&'a str, &'a str)>) -> OpType {
    OpType::Set(proto::config_request::Set {
        pairs: pairs
            .map(|(k, v)| proto::KeyValue {
                key: k.to_owned(),
                value: Some(v.to_owned()),
            })
            .collect(),
        silent: None,
    })
}
