//! The builder's configs, set on every server-side session before its
//! first call (see `config` for why), and the Config requests both use.

use std::sync::atomic::Ordering;

use super::error::SparkError;
use super::generation::Generation;
use super::spark::SparkSession;
use crate::proto;
use crate::proto::config_request::operation::OpType;
use crate::reattach::ReattachError;
use crate::retrying::{PySparkRetrying, Retrying};
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
    ///
    /// The client's own defaults (rows per result batch) go in the same
    /// `Set` when there are builder configs, else alone. A server that
    /// refuses them (an older or another engine) is logged once per session
    /// and otherwise ignored: the builder's configs are then set without
    /// them. Sent alone they get one attempt: a server down or busy is
    /// left to the call itself to retry and report (they are tried again
    /// before the next call); a stale session, a TLS or token failure fails
    /// the call as it would have.
    pub(super) async fn apply_builder_configs(&self, g: &Generation) -> Result<(), SparkError> {
        let options = self.options();
        let (configs, defaults) = (&options.configs.0, &options.default_configs.0);
        if configs.is_empty() && defaults.is_empty() {
            return Ok(());
        }
        if configs.is_empty() {
            // One Config for every call that finds the defaults unset,
            // however many start at once: they wait for the one in flight.
            let set = g
                .defaults_set
                .get_or_try_init(|| async {
                    match self.set_configs_once(g, defaults).await {
                        Err(e) if refused(&e) => {
                            self.note_default_refused(&e);
                            Ok(())
                        }
                        other => other,
                    }
                })
                .await;
            return match set {
                Ok(()) => Ok(()),
                // Down or busy: the call itself retries and reports it (and
                // the defaults are tried again before the next call).
                Err(e) if e.server_error().is_some() && !stale(&e) => Ok(()),
                // Stale, a TLS or token failure: the call would meet it too.
                Err(e) => Err(e),
            };
        }
        g.configured
            .get_or_try_init(|| async {
                if defaults.is_empty() || options.default_configs_refused.load(Ordering::Relaxed) {
                    return self.set_configs(g, configs).await;
                }
                let both: Vec<_> = configs.iter().chain(defaults).cloned().collect();
                match self.set_configs(g, &both).await {
                    Err(e) if refused(&e) => {
                        // The user's configs alone: their refusal is theirs.
                        self.set_configs(g, configs).await?;
                        self.note_default_refused(&e);
                        Ok(())
                    }
                    other => other,
                }
            })
            .await
            .map(drop)
    }

    /// One Config `Set` of `pairs` on generation `g`.
    async fn set_configs(
        &self,
        g: &Generation,
        pairs: &[(String, String)],
    ) -> Result<(), SparkError> {
        let retrying = self.options().retrying.clone();
        self.set_configs_with(retrying, g, pairs).await
    }

    /// [`set_configs`](Self::set_configs) in one attempt, without retries:
    /// for the defaults sent alone, so a server that is down costs only the
    /// call's own retries.
    async fn set_configs_once(
        &self,
        g: &Generation,
        pairs: &[(String, String)],
    ) -> Result<(), SparkError> {
        let once = Retrying::pyspark_with(Vec::new());
        self.set_configs_with(once, g, pairs).await
    }

    async fn set_configs_with(
        &self,
        retrying: Retrying,
        g: &Generation,
        pairs: &[(String, String)],
    ) -> Result<(), SparkError> {
        let op = set_op(pairs.iter().map(|(k, v)| (k.as_str(), v.as_str())));
        let req = self.config_request(g, &op);
        let call = |mut c: SparkClient, r| async move { c.config(r).await };
        let deadline = self.options().deadlines.config;
        let result = match self.send_with(retrying, deadline, req, &call).await {
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
    }

    /// The server refused the client's defaults: logged the first time.
    fn note_default_refused(&self, e: &SparkError) {
        let options = self.options();
        if !options
            .default_configs_refused
            .swap(true, Ordering::Relaxed)
        {
            let keys: Vec<&str> = options
                .default_configs
                .0
                .iter()
                .map(|(k, _)| k.as_str())
                .collect();
            tracing::warn!(
                confs = ?keys,
                error = %e,
                "the server refused the client's default confs; its own values apply \
                 (turn them off with result_batch_rows=server)"
            );
        }
    }
}

/// The server answered a Config call with a refusal of its content (not a
/// lost session, a refused token or a transport failure, which the
/// session's next call meets too).
fn refused(e: &SparkError) -> bool {
    use tonic::Code;
    let Some(server) = e.server_error() else {
        return false;
    };
    let transient = matches!(
        server.code(),
        Code::Unavailable
            | Code::DeadlineExceeded
            | Code::Cancelled
            | Code::Unauthenticated
            | Code::PermissionDenied
            | Code::ResourceExhausted
            | Code::Aborted
    );
    !transient && !stale(e)
}

/// The session is gone or changed (the renewal rules apply).
fn stale(e: &SparkError) -> bool {
    matches!(
        e,
        SparkError::Execution(ReattachError::ServerSideSessionChanged { .. })
            | SparkError::SessionClosed
    ) || e
        .error_class()
        .is_some_and(|c| c.starts_with("INVALID_HANDLE"))
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
