//! The session's own RPCs: the server's version, interrupts, and the end
//! of the session (`release_session`, `close`).

use super::error::SparkError;
use super::spark::SparkSession;
use crate::proto;
use crate::transport::SparkClient;

impl SparkSession {
    /// The server's Spark version.
    pub async fn spark_version(&self) -> Result<String, SparkError> {
        let resp = self
            .unary(
                self.options().deadlines.analyze_plan,
                |g| proto::AnalyzePlanRequest {
                    session_id: g.session_id().to_owned(),
                    client_observed_server_side_session_id: g.observed(),
                    user_context: self.user_context(),
                    client_type: self.client_type_field(),
                    analyze: Some(proto::analyze_plan_request::Analyze::SparkVersion(
                        proto::analyze_plan_request::SparkVersion {},
                    )),
                },
                |mut c, r| async move { c.analyze_plan(r).await },
            )
            .await?;
        match resp.result {
            Some(proto::analyze_plan_response::Result::SparkVersion(v)) => Ok(v.version),
            _ => Err(SparkError::Protocol(
                "AnalyzePlan returned no spark_version".to_owned(),
            )),
        }
    }

    pub(super) async fn interrupt(
        &self,
        kind: proto::interrupt_request::InterruptType,
        target: Option<proto::interrupt_request::Interrupt>,
    ) -> Result<Vec<String>, SparkError> {
        let resp = self
            .unary(
                self.options().deadlines.interrupt,
                |g| proto::InterruptRequest {
                    session_id: g.session_id().to_owned(),
                    client_observed_server_side_session_id: g.observed(),
                    user_context: self.user_context(),
                    client_type: self.client_type_field(),
                    interrupt_type: kind as i32,
                    interrupt: target.clone(),
                },
                |mut c, r| async move { c.interrupt(r).await },
            )
            .await?;
        Ok(resp.interrupted_ids)
    }

    /// Interrupt every running operation of this session; returns their ids.
    pub async fn interrupt_all(&self) -> Result<Vec<String>, SparkError> {
        self.interrupt(proto::interrupt_request::InterruptType::All, None)
            .await
    }

    /// Interrupt one operation; returns its id if it was running.
    pub async fn interrupt_operation(&self, operation_id: &str) -> Result<Vec<String>, SparkError> {
        self.interrupt(
            proto::interrupt_request::InterruptType::OperationId,
            Some(proto::interrupt_request::Interrupt::OperationId(
                operation_id.to_owned(),
            )),
        )
        .await
    }

    /// Release the server session (ReleaseSession), as PySpark's `stop()`
    /// does; later calls fail with [`SparkError::SessionClosed`]. A second
    /// call sends nothing and succeeds.
    pub async fn release_session(&self) -> Result<(), SparkError> {
        if self.was_closed() {
            return Ok(());
        }
        let session_id = self.session_id();
        let req = proto::ReleaseSessionRequest {
            session_id: session_id.clone(),
            user_context: self.user_context(),
            client_type: self.client_type_field(),
            allow_reconnect: false,
        };
        let deadline = self.options().deadlines.release_session;
        let current = self.renewal().current();
        let resp = match self
            .send(deadline, req, &|mut c: SparkClient, r| async move {
                c.release_session(r).await
            })
            .await
        {
            Ok(resp) => resp,
            Err(status) => {
                let rpc = Some("ReleaseSession");
                return Err(self.call_error(status, rpc, None, &current).await);
            }
        };
        // The session is closed either way; only a different session id is an error.
        if resp.session_id != session_id {
            return Err(SparkError::Protocol(
                "ReleaseSession answered another session".to_owned(),
            ));
        }
        Ok(())
    }

    /// End the session: wait (at most the configured release wait, 10 s by
    /// default) for outstanding background releases, then release the
    /// server session ([`release_session`](Self::release_session)). Calls
    /// after it fail with [`SparkError::SessionClosed`]; closing twice is
    /// harmless. An error means the server could not be told; the session
    /// is closed locally either way.
    pub async fn close(&self) -> Result<(), SparkError> {
        if !self.is_closed() {
            let wait = self.options().release_wait;
            if !self.releases().wait_idle(wait).await {
                tracing::warn!(
                    outstanding = self.releases().outstanding(),
                    "close: background releases still running after {wait:?}"
                );
            }
        }
        self.release_session().await
    }
}
