//! A channel that can be asked, per request, to dial a fresh connection.
//!
//! A connection can die without telling anyone: a stuck middlebox or a
//! half-dead NAT entry stops carrying bytes in both directions, with no FIN
//! and no RST. Every RPC sent on it waits forever (or until HTTP/2 keepalive,
//! 60 s + 20 s by default, notices). When the reattachable stream gives up on
//! a silent segment (its idle timeout), the ReattachExecute it sends next
//! must therefore not go down the same connection: it would be just as
//! silent.
//!
//! [`FreshConnection`] is a request extension that says so, and
//! [`ReconnectingChannel`] honours it: it holds a tonic [`Channel`] and, for a
//! request carrying the marker, replaces it with a newly dialled one before
//! sending. Later requests use the new channel too. Streams already open on
//! the old connection keep it alive until they end; the old connection
//! closes once nothing uses it. Channels that do not know the marker (a plain
//! tonic `Channel`, a user's own stack) simply ignore it.
//!
//! [`crate::session::SparkSession`] builds its channel as a
//! `ReconnectingChannel` unless given one of its own.
//!
//! ```
//! use spark_connect_retry::reconnect::{FreshConnection, ReconnectingChannel};
//! use tonic::transport::Endpoint;
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let channel = ReconnectingChannel::new(Endpoint::from_static("http://127.0.0.1:15002"));
//! let mut request = tonic::Request::new(());
//! request.extensions_mut().insert(FreshConnection);
//! assert_eq!(channel.reconnects(), 0); // counted when such a request is sent
//! # Ok(())
//! # }
//! ```

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use tonic::transport::{Channel, Endpoint};
use tower::Service;
use tower::ServiceExt;

use crate::connector::Connector;

/// Request extension: send this request over a newly dialled connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct FreshConnection;

/// A tonic [`Channel`] that dials a new connection for a request carrying
/// [`FreshConnection`] (see the [module docs](self)). Cheap to clone; clones
/// share the current channel.
#[derive(Debug, Clone)]
pub struct ReconnectingChannel {
    endpoint: Endpoint,
    /// How a connection is dialled, when not TCP to the endpoint's host.
    connector: Option<Connector>,
    current: Arc<Mutex<Channel>>,
    reconnects: Arc<AtomicU64>,
}

impl ReconnectingChannel {
    /// A channel to `endpoint` that connects lazily, on first use. Must be
    /// called inside a tokio runtime.
    pub fn new(endpoint: Endpoint) -> Self {
        Self::dialled_by(endpoint, None)
    }

    /// Like [`new`](Self::new), each connection dialled by `connector`
    /// (TLS, when the endpoint has it, runs over the stream it yields).
    pub fn with_connector(endpoint: Endpoint, connector: Connector) -> Self {
        Self::dialled_by(endpoint, Some(connector))
    }

    fn dialled_by(endpoint: Endpoint, connector: Option<Connector>) -> Self {
        let current = connect_lazy(&endpoint, connector.as_ref());
        ReconnectingChannel {
            endpoint,
            connector,
            current: Arc::new(Mutex::new(current)),
            reconnects: Arc::new(AtomicU64::new(0)),
        }
    }

    /// How many times a fresh connection was dialled (a request carried
    /// [`FreshConnection`]). Not
    /// [`SparkSession::session_renewals`](crate::session::SparkSession::session_renewals),
    /// which counts fresh server-side sessions.
    pub fn reconnects(&self) -> u64 {
        self.reconnects.load(Ordering::SeqCst)
    }

    /// The channel for `req`: a new one if it carries [`FreshConnection`].
    fn channel_for<B>(&self, req: &http::Request<B>) -> Channel {
        let mut current = self.current.lock().unwrap_or_else(|e| e.into_inner());
        if req.extensions().get::<FreshConnection>().is_some() {
            *current = connect_lazy(&self.endpoint, self.connector.as_ref());
            self.reconnects.fetch_add(1, Ordering::SeqCst);
            tracing::debug!("reconnecting channel: dialling a fresh connection");
        }
        current.clone()
    }
}

/// A lazy channel to `endpoint`, over `connector` when there is one.
fn connect_lazy(endpoint: &Endpoint, connector: Option<&Connector>) -> Channel {
    match connector {
        Some(c) => endpoint.connect_with_connector_lazy(c.clone()),
        None => endpoint.connect_lazy(),
    }
}

type ResponseFuture = Pin<
    Box<
        dyn Future<Output = Result<http::Response<tonic::body::Body>, tonic::transport::Error>>
            + Send,
    >,
>;

impl Service<http::Request<tonic::body::Body>> for ReconnectingChannel {
    type Response = http::Response<tonic::body::Body>;
    type Error = tonic::transport::Error;
    type Future = ResponseFuture;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        // Readiness is awaited per call, on the channel the call picks.
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: http::Request<tonic::body::Body>) -> Self::Future {
        let channel = self.channel_for(&req);
        Box::pin(async move { channel.oneshot(req).await })
    }
}
