//! Calls on the session's current generation: renewed first if it went
//! stale (with `SparkSessionBuilder::renew_stale_session(true)`), with the
//! builder's configs applied once, and sent once more on a fresh
//! generation when the server refused the call as stale. The rule for
//! "stale" is in `stale`.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tonic::Status;

use super::error::SparkError;
use super::generation::Generation;
use super::spark::{SessionIds, SparkSession, UnaryRequest};
use crate::transport::SparkClient;

impl SparkSession {
    /// The generation a new call runs on: renewed if stale (with renewal
    /// on), with the builder's configs applied once.
    pub(crate) async fn generation(&self) -> Result<Arc<Generation>, SparkError> {
        self.check_open()?;
        let renewal = self.renewal();
        let g = renewal.successor(renewal.current());
        self.apply_builder_configs(&g).await?;
        Ok(g)
    }

    /// Runs a call (a unary RPC) on the current generation; when the server
    /// refused it as stale and renewal is on, once more on a fresh one.
    pub(super) async fn with_renewal<T, F, Fut>(&self, call: F) -> Result<T, SparkError>
    where
        F: Fn(Arc<Generation>) -> Fut,
        Fut: Future<Output = Result<T, SparkError>>,
    {
        let g = self.generation().await?;
        match call(g.clone()).await {
            Err(e) if self.resend(self.note_failure(&g, &e, true)) => {
                call(self.generation().await?).await
            }
            other => other,
        }
    }

    /// Run a unary RPC under the retry loop with a deadline: on the current
    /// generation (renewed and re-sent once if the server refused it as
    /// stale, with renewal on), errors enriched, response ids verified.
    pub(super) async fn unary<Req, Resp, B, F, Fut>(
        &self,
        deadline: Option<Duration>,
        build: B,
        call: F,
    ) -> Result<Resp, SparkError>
    where
        Req: Clone + UnaryRequest,
        Resp: SessionIds,
        B: Fn(&Generation) -> Req,
        F: Fn(SparkClient, tonic::Request<Req>) -> Fut,
        Fut: Future<Output = Result<tonic::Response<Resp>, Status>>,
    {
        self.with_renewal(|g| {
            let req = build(&g);
            let call = &call;
            async move {
                let resp = match self.send(deadline, req, call).await {
                    Ok(r) => r,
                    Err(status) => {
                        return Err(self.call_error(status, Some(Req::METHOD), None, &g).await);
                    }
                };
                let (sid, ssid) = resp.ids();
                self.verify(&g, sid, ssid)?;
                Ok(resp)
            }
        })
        .await
    }
}
