//! [`TokenService`]: the tower service that puts the cached token on every
//! request, so every RPC of a session (unary, streams, background
//! releases, uploads) is authenticated by one piece of code.
//!
//! A request may carry a [`TokenUsed`] slot in its extensions; the service
//! writes the serial of the token it attached there, so the caller can
//! report exactly that token refused ([`Credentials::invalidate`]).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};

use http::header::AUTHORIZATION;
use tower::Service;

use super::cache::Credentials;
use super::refusal::provider_failed;
use crate::retrying::BoxFuture;
use crate::transport::BoxError;

/// Where the service notes which token a request carried (0: none).
#[derive(Debug, Clone, Default)]
pub(crate) struct TokenUsed(Arc<AtomicU64>);

impl TokenUsed {
    /// The serial of the token attached, 0 if none was.
    pub(crate) fn serial(&self) -> u64 {
        self.0.load(Ordering::SeqCst)
    }
    fn set(&self, serial: u64) {
        self.0.store(serial, Ordering::SeqCst);
    }
    #[cfg(test)]
    pub(crate) fn set_for_test(&self, serial: u64) {
        self.set(serial);
    }
}

/// Adds `authorization: Bearer <token>` from [`Credentials`] to every
/// request that has none. With no credentials it passes requests through.
#[derive(Debug, Clone)]
pub(crate) struct TokenService<S> {
    inner: S,
    credentials: Option<Credentials>,
}

impl<S> TokenService<S> {
    pub(crate) fn new(inner: S, credentials: Option<Credentials>) -> Self {
        TokenService { inner, credentials }
    }
}

impl<S, B, R> Service<http::Request<B>> for TokenService<S>
where
    S: Service<http::Request<B>, Response = R> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Into<BoxError>,
    B: Send + 'static,
{
    type Response = R;
    type Error = BoxError;
    type Future = BoxFuture<Result<R, BoxError>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, mut req: http::Request<B>) -> Self::Future {
        // The clone is not ready; the ready one goes with this request.
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        let Some(credentials) = self.credentials.clone() else {
            let fut = inner.call(req);
            return Box::pin(async move { fut.await.map_err(Into::into) });
        };
        Box::pin(async move {
            if !req.headers().contains_key(AUTHORIZATION) {
                let (value, serial) = credentials
                    .bearer()
                    .await
                    .map_err(|e| Box::new(provider_failed(e)) as BoxError)?;
                req.headers_mut().insert(AUTHORIZATION, value);
                if let Some(used) = req.extensions().get::<TokenUsed>() {
                    used.set(serial);
                }
            }
            inner.call(req).await.map_err(Into::into)
        })
    }
}
