//! The builder's configs, set on every server-side session before its
//! first call (see `config` for why), and the Config requests both use.

use super::error::SparkError;
use super::generation::Generation;
use super::spark::SparkSession;
use crate::proto;
use crate::proto::config_request::operation::OpType;
use crate::reattach::ReattachError;
use crate::transport::SparkClient;

impl SparkSession {
    /// A Config request with operation `op` for generation `g`.
    pub(super) fn config_request(&self, g: &Generation, op: &OpType) -> proto::ConfigRequest {
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
                    let changed = matches!(
                        e,
                        SparkError::Execution(ReattachError::ServerSideSessionChanged { .. })
                    );
                    self.note_failure(g, e, !changed);
                })
            })
            .await
            .map(drop)
    }
}

/// A Config `Set` of these pairs (not silent: refusals are errors).
pub(super) fn set_op<'a>(pairs: impl Iterator<Item = (&'a str, &'a str)>) -> OpType {
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
