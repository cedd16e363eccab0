//! A tiny echo gRPC service for tonic-retry's README, doctests and tests.
//!
//! Retries can only be shown against a server that fails on purpose: this
//! crate is a plain generated tonic client ([`EchoClient`]) and a server
//! ([`Scripted`]) whose every call runs a script that may fail it, delay
//! it, or answer it, so an example can say "the first call fails with
//! UNAVAILABLE" in one line. [`CollectorClient`] and [`Collector`] are a
//! client-streaming service of their own (so that the echo's servers need
//! not implement it), for tests of replayed request streams. [`capture`] is
//! the tracing capture every test binary of the workspace that asserts on
//! events uses. It is not published.
#![warn(missing_docs, unreachable_pub)]

pub mod capture;
#[cfg(feature = "otel")]
pub mod metrics;

use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use tokio::net::TcpListener;
use tokio_stream::wrappers::TcpListenerStream;
use tonic::{Request, Response, Status};

// The code generated from `proto/echo.proto`, private so that each item has
// one public path (re-exported below).
#[allow(missing_docs, unreachable_pub, clippy::all)]
mod pb {
    tonic::include_proto!("echo");
}

pub use pb::collector_client::CollectorClient;
pub use pb::collector_server::{Collector, CollectorServer};
pub use pb::echo_client::EchoClient;
pub use pb::echo_server::{Echo, EchoServer};
pub use pb::{EchoReply, EchoRequest};

/// A boxed, sendable future.
pub type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send + 'static>>;

type Script = dyn Fn(u32) -> BoxFuture<Result<(), Status>> + Send + Sync;

/// An echo server whose calls run a script: call number `n` (0 for the
/// first, counted across both methods) answers when `script(n)` completes,
/// with an echo if it returns `Ok`, or with its status.
#[derive(Clone)]
pub struct Scripted {
    calls: Arc<AtomicU32>,
    script: Arc<Script>,
}

impl Scripted {
    /// A server running `script` for each call.
    pub fn new<F, Fut>(script: F) -> Self
    where
        F: Fn(u32) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<(), Status>> + Send + 'static,
    {
        Scripted {
            calls: Arc::new(AtomicU32::new(0)),
            script: Arc::new(move |n| Box::pin(script(n))),
        }
    }

    /// A server whose first `n` calls fail with `status`; the others echo.
    pub fn failing_first(n: u32, status: Status) -> Self {
        Scripted::new(move |k| {
            let result = if k < n { Err(status.clone()) } else { Ok(()) };
            std::future::ready(result)
        })
    }

    /// Calls received so far.
    pub fn calls(&self) -> u32 {
        self.calls.load(Ordering::SeqCst)
    }

    /// Serve on a fresh loopback port, in the background; returns its address.
    pub async fn spawn(self) -> std::io::Result<SocketAddr> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        tokio::spawn(
            tonic::transport::Server::builder()
                .add_service(EchoServer::new(self))
                .serve_with_incoming(TcpListenerStream::new(listener)),
        );
        Ok(addr)
    }

    async fn run(&self) -> Result<(), Status> {
        let n = self.calls.fetch_add(1, Ordering::SeqCst);
        (self.script)(n).await
    }
}

#[tonic::async_trait]
impl Echo for Scripted {
    async fn say(&self, request: Request<EchoRequest>) -> Result<Response<EchoReply>, Status> {
        self.run().await?;
        let message = request.into_inner().message;
        Ok(Response::new(EchoReply { message }))
    }

    type RepeatStream = tokio_stream::Iter<std::vec::IntoIter<Result<EchoReply, Status>>>;

    async fn repeat(
        &self,
        request: Request<EchoRequest>,
    ) -> Result<Response<Self::RepeatStream>, Status> {
        self.run().await?;
        let EchoRequest { message, count } = request.into_inner();
        let replies = (0..count)
            .map(|_| {
                Ok(EchoReply {
                    message: message.clone(),
                })
            })
            .collect::<Vec<_>>();
        Ok(Response::new(tokio_stream::iter(replies)))
    }
}
