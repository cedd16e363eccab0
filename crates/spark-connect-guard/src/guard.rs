//! [`Guard`]: a running guard, and the [`GuardBuilder`] that starts it.

use std::net::{Ipv4Addr, SocketAddr};

use spark_connect_retry::layer::{ReattachLayer, Releases};
use spark_connect_retry::session::{Http2FlowControl, SparkError, SparkSessionBuilder};
use spark_connect_retry::transport::{GrpcChannel, grpc_channel};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tokio_stream::Stream;
use tokio_stream::wrappers::TcpListenerStream;
use tonic::transport::server::Connected;
use tower::Layer;

/// The guard's HTTP/2 receive windows towards the upstream: 1 MiB per
/// stream, 32 MiB per connection (shared by every client's calls).
///
/// *Why small per stream:* the server counts a response as sent once the
/// guard has read it, and keeps only so much of what it sent for a
/// reattach (Spark: `observerRetryBufferSize`, 10 MiB). What the guard has
/// read but the client has not received is lost to the client when its
/// connection breaks; the client then resumes from further back. The
/// stream window bounds that gap (plus one response being handed over), so
/// it stays well inside the server's buffer. The cost: at most one window
/// per round trip to the upstream (1 MiB at 10 ms is 100 MiB/s).
pub(crate) const UPSTREAM_FLOW_CONTROL: Http2FlowControl = Http2FlowControl::Fixed {
    stream_window: 1024 * 1024,
    connection_window: 32 * 1024 * 1024,
};

/// Why a guard could not start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum GuardError {
    /// The upstream connection string or its options are unusable.
    #[error("upstream: {0}")]
    Upstream(#[from] SparkError),
    /// The listen address could not be bound.
    #[error("cannot listen on {addr}: {source}")]
    Listen {
        /// The address asked for.
        addr: SocketAddr,
        /// The socket's error.
        #[source]
        source: std::io::Error,
    },
}

/// Starts a [`Guard`].
#[derive(Debug)]
#[must_use]
pub struct GuardBuilder {
    upstream: SparkSessionBuilder,
    listen: SocketAddr,
    layer: ReattachLayer,
}

impl GuardBuilder {
    /// Listen here instead of `127.0.0.1:0` (port 0: any free port). An
    /// address off loopback makes the guard reachable from other hosts:
    /// only when asked.
    pub fn listen(mut self, addr: SocketAddr) -> Self {
        self.listen = addr;
        self
    }

    /// Reach the upstream as this session builder would (its connection
    /// string, token provider, CA, client identity, connect timeout, flow
    /// control; see [`SparkSessionBuilder::build_channel`]). Give it
    /// `UPSTREAM_FLOW_CONTROL` (or a stream window as small) unless the
    /// server keeps more than 10 MiB for reattaches.
    pub fn upstream(mut self, upstream: SparkSessionBuilder) -> Self {
        self.upstream = upstream;
        self
    }

    /// The reattach layer's retry policy, deadlines and stall detection
    /// (default: PySpark's, with a 10 s idle timeout). Its releases are
    /// always left to the clients (see the crate docs).
    pub fn layer(mut self, layer: ReattachLayer) -> Self {
        self.layer = layer;
        self
    }

    /// Bind, and serve in the background on the current tokio runtime.
    pub async fn start(self) -> Result<Guard, GuardError> {
        let channel = self.upstream.build_channel()?;
        let listener =
            TcpListener::bind(self.listen)
                .await
                .map_err(|source| GuardError::Listen {
                    addr: self.listen,
                    source,
                })?;
        let addr = listener.local_addr().map_err(|source| GuardError::Listen {
            addr: self.listen,
            source,
        })?;
        Ok(serve(
            self.layer,
            addr,
            channel,
            TcpListenerStream::new(listener),
        ))
    }

    /// Serves on the connections `incoming` yields, towards `upstream`,
    /// instead of binding [`listen`](Self::listen) and connecting by the
    /// [`upstream`](Self::upstream) connection string (neither is used):
    /// for transports the guard does not open itself, such as a simulated
    /// network. `addr` is what [`Guard::local_addr`] reports. Give
    /// `upstream` the guard's flow control (HTTP/2 windows of 1 MiB per
    /// stream and 32 MiB per connection) unless the server keeps more than
    /// 10 MiB for reattaches.
    pub fn serve_incoming<I, IO, IE>(
        self,
        addr: SocketAddr,
        upstream: tonic::transport::Channel,
        incoming: I,
    ) -> Guard
    where
        I: Stream<Item = Result<IO, IE>> + Send + 'static,
        IO: AsyncRead + AsyncWrite + Connected + Unpin + Send + 'static,
        IE: Into<Box<dyn std::error::Error + Send + Sync>>,
    {
        serve(self.layer, addr, grpc_channel(upstream), incoming)
    }
}

/// Serves the guard's service on `incoming`, in a task of the current
/// runtime.
fn serve<I, IO, IE>(
    layer: ReattachLayer,
    addr: SocketAddr,
    channel: GrpcChannel,
    incoming: I,
) -> Guard
where
    I: Stream<Item = Result<IO, IE>> + Send + 'static,
    IO: AsyncRead + AsyncWrite + Connected + Unpin + Send + 'static,
    IE: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let service = layer.releases(Releases::CallerOnly).layer(channel);
    let (stop, stopped) = oneshot::channel::<()>();
    let task = tokio::spawn(async move {
        let served = tonic::transport::Server::builder()
            .tcp_nodelay(true)
            .serve_with_incoming_shutdown(service, incoming, async {
                let _ = stopped.await;
            })
            .await;
        if let Err(e) = served {
            tracing::error!(error = %e, "spark-connect-guard: server failed");
        }
    });
    tracing::info!(%addr, "spark-connect-guard: listening");
    Guard {
        addr,
        stop: Some(stop),
        task: Some(task),
    }
}

/// A running guard. Dropping it stops it (in the background); call
/// [`shutdown`](Self::shutdown) to wait until it has stopped.
#[derive(Debug)]
pub struct Guard {
    addr: SocketAddr,
    stop: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<()>>,
}

impl Guard {
    /// A guard in front of `upstream`, an `sc://` connection string.
    pub fn builder(upstream: impl Into<String>) -> GuardBuilder {
        GuardBuilder {
            upstream: SparkSessionBuilder::default()
                .remote(upstream)
                .http2_flow_control(UPSTREAM_FLOW_CONTROL),
            listen: SocketAddr::from((Ipv4Addr::LOCALHOST, 0)),
            layer: ReattachLayer::new(),
        }
    }

    /// The address it listens on.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// The connection string a client uses to reach it: `sc://HOST:PORT`.
    pub fn remote(&self) -> String {
        format!("sc://{}", self.addr)
    }

    /// Stop accepting, let open calls end, and wait until it has stopped.
    pub async fn shutdown(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}
