//! The response future of [`RetryService`](super::RetryService).
//!
//! Most calls succeed on their first attempt, so that path is a small
//! hand-written state machine held inline by the caller's future: the first
//! attempt is already in flight when [`RetryService::call`] returns, and
//! its response is read here. Only a failed attempt moves the call into the
//! boxed retry loop, which owns everything a retry needs.
//!
//! [`RetryService::call`]: super::RetryService

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, PoisonError};
use std::task::{Context, Poll};

use bytes::Bytes;
use http::{Request, Response};
use pin_project_lite::pin_project;
use tonic::body::Body;
use tower::Service;

use super::attempt::{Outcome, ReadResponse, transport_failure};
use super::body::RetryBody;
use super::service::{Call, InnerService, Next, Replayable, ServiceContext, retry_loop};
use crate::retrying::BoxFuture;
use crate::sanitize::sanitize_response;

/// The error type of [`RetryService`](super::RetryService): a boxed error,
/// which tonic's generated clients turn into a [`tonic::Status`]. When the
/// layer gives up on a transport failure the box holds the `Status` tonic
/// would have built itself (source chain included), so callers see no change.
pub use crate::transport::BoxError;

/// What a call keeps in case its first attempt fails.
pub(crate) struct Retry<S> {
    /// The layer's configuration and a spare inner service, cloned again
    /// for retries only, so the success path clones no service.
    pub(crate) context: Arc<ServiceContext<S>>,
    pub(crate) call: Replayable,
}

pin_project! {
    /// The future returned by [`RetryService`](super::RetryService); `Send`
    /// when the inner service and its future are.
    pub struct ResponseFuture<S, F> {
        #[pin]
        state: State<F>,
        // Outside the state, so that moving from the first attempt to its
        // response does not move it.
        retry: Option<Box<Retry<S>>>,
        span: tracing::Span,
    }
}

pin_project! {
    #[project = StateProj]
    enum State<F> {
        /// Not retried: the inner call, its response sanitized.
        Passthrough { #[pin] fut: F },
        /// The first attempt, sent from `call`.
        First { #[pin] fut: F },
        /// The first attempt's response, read until it can be judged.
        Reading { read: ReadResponse },
        /// Retries, or a call that needed waiting or a timer from the start.
        Looping { fut: BoxFuture<Result<Response<RetryBody>, BoxError>> },
        /// Finished.
        Done,
    }
}

impl<S, F> ResponseFuture<S, F> {
    pub(crate) fn passthrough(fut: F, span: tracing::Span) -> Self {
        ResponseFuture {
            state: State::Passthrough { fut },
            retry: None,
            span,
        }
    }

    pub(crate) fn first(fut: F, retry: Retry<S>, span: tracing::Span) -> Self {
        ResponseFuture {
            state: State::First { fut },
            retry: Some(Box::new(retry)),
            span,
        }
    }

    pub(crate) fn looping(
        fut: BoxFuture<Result<Response<RetryBody>, BoxError>>,
        span: tracing::Span,
    ) -> Self {
        ResponseFuture {
            state: State::Looping { fut },
            retry: None,
            span,
        }
    }
}

impl<S, F> fmt::Debug for ResponseFuture<S, F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ResponseFuture")
    }
}

impl<S, F, B> Future for ResponseFuture<S, F>
where
    S: Service<Request<Body>, Response = Response<B>, Future = F> + Clone + Send + 'static,
    S::Future: Send,
    S::Error: Into<BoxError>,
    F: Future<Output = Result<Response<B>, S::Error>>,
    B: http_body::Body<Data = Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
{
    type Output = Result<Response<RetryBody>, BoxError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut this = self.project();
        let _entered = this.span.enter();
        loop {
            let failed = match this.state.as_mut().project() {
                StateProj::Passthrough { fut } => {
                    let res = std::task::ready!(fut.poll(cx));
                    this.state.set(State::Done);
                    return Poll::Ready(
                        res.map(|r| sanitize_response(r, RetryBody::passed))
                            .map_err(Into::into),
                    );
                }
                StateProj::First { fut } => match std::task::ready!(fut.poll(cx)) {
                    Ok(res) => {
                        let Some(retry) = this.retry.as_ref() else {
                            polled_after_completion()
                        };
                        let (kind, cap) = (
                            retry.call.method.kind(),
                            retry.context.shared.max_response_buffer,
                        );
                        let read = ReadResponse::new(res, kind, cap);
                        this.state.set(State::Reading { read });
                        continue;
                    }
                    Err(e) => transport_failure(e.into()),
                },
                StateProj::Reading { read } => match std::task::ready!(Pin::new(read).poll(cx)) {
                    // The common case: the first attempt's response ends the
                    // call, with the same bookkeeping as in `after_attempt`.
                    Outcome::Done(res) => {
                        let Some(retry) = this.retry.take() else {
                            polled_after_completion()
                        };
                        retry
                            .context
                            .shared
                            .record_done(|| retry.call.head.path(), 0);
                        this.state.set(State::Done);
                        return Poll::Ready(Ok(res));
                    }
                    failed => failed,
                },
                StateProj::Looping { fut } => {
                    let res = std::task::ready!(fut.as_mut().poll(cx));
                    this.state.set(State::Done);
                    return Poll::Ready(res);
                }
                StateProj::Done => polled_after_completion(),
            };
            let Some(retry) = this.retry.take() else {
                polled_after_completion()
            };
            match after_first_failure(retry, failed) {
                Ok(fut) => this.state.set(State::Looping { fut }),
                Err(res) => {
                    this.state.set(State::Done);
                    return Poll::Ready(res);
                }
            }
        }
    }
}

/// The first attempt failed: judged by the same decisions as every other
/// attempt, either the call ends here (`Err`: its result) or it continues
/// in the boxed retry loop at attempt 1 (`Ok`). Out of line and cold, so
/// that the success path of `poll` stays small.
#[cold]
#[inline(never)]
// `Err` carries the call's result (a response, inline as everywhere else).
#[allow(clippy::type_complexity, clippy::result_large_err)]
fn after_first_failure<S: InnerService + Clone>(
    retry: Box<Retry<S>>,
    outcome: Outcome,
) -> Result<BoxFuture<Result<Response<RetryBody>, BoxError>>, Result<Response<RetryBody>, BoxError>>
{
    let Retry { context, call } = *retry;
    let mut decide = Call::new(&context.shared, &call, None);
    match decide.after_attempt(outcome, 0, Default::default()) {
        Next::Return(res) => Err(res),
        Next::Wait(wait) => {
            let state = decide.into_state();
            let svc = context
                .spare
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .clone();
            let shared = context.shared.clone();
            Ok(Box::pin(retry_loop(
                svc,
                shared,
                call,
                None,
                state,
                1,
                Some(wait),
            )))
        }
    }
}

/// The layer's futures polled after completion, which the `Future` contract
/// allows to panic (also the one way a first attempt could be without its
/// retry context, which is taken when the attempt is judged).
#[cold]
pub(crate) fn polled_after_completion() -> ! {
    panic!("RetryService's ResponseFuture polled after completion")
}
