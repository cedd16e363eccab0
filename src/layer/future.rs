//! The response future of [`RetryService`](super::RetryService).

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use crate::retrying::BoxFuture;

/// The error type of [`RetryService`](super::RetryService): a boxed error,
/// which tonic's generated clients turn into a [`tonic::Status`]. When the
/// layer gives up on a transport failure the box holds the `Status` tonic
/// would have built itself (source chain included), so callers see no change.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The future returned by [`RetryService`](super::RetryService); `Send`.
pub struct ResponseFuture {
    inner: BoxFuture<Result<http::Response<tonic::body::Body>, BoxError>>,
}

impl ResponseFuture {
    pub(crate) fn new(
        inner: BoxFuture<Result<http::Response<tonic::body::Body>, BoxError>>,
    ) -> Self {
        ResponseFuture { inner }
    }
}

impl fmt::Debug for ResponseFuture {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ResponseFuture")
    }
}

impl Future for ResponseFuture {
    type Output = Result<http::Response<tonic::body::Body>, BoxError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        self.inner.as_mut().poll(cx)
    }
}
