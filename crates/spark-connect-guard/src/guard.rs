//! [`Guard`]: a running guard, and the [`GuardBuilder`] that starts it.

use std::net::{Ipv4Addr, SocketAddr};

use spark_connect_retry::layer::{ReattachLayer, Releases};
use spark_connect_retry::session::{Http2FlowControl, SparkError, SparkSessionBuilder};
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tokio_stream::wrappers::TcpListenerStream;
use tonic_health::ServingStatus;
use tonic_health::pb::health_server::HealthServer;
use tonic_health::server::{HealthReporter, HealthService};
use tower::Layer;

use crate::front::Front;
use crate::health::{self, HealthCheck};

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
    /// An option has a value the guard cannot use.
    #[error("{option}: {reason}")]
    InvalidOption {
        /// The option, as the builder and the CLI name it.
        option: &'static str,
        /// What is wrong with its value.
        reason: &'static str,
    },
}

/// Starts a [`Guard`].
#[derive(Debug)]
#[must_use]
pub struct GuardBuilder {
    upstream: SparkSessionBuilder,
    listen: SocketAddr,
    layer: ReattachLayer,
    health: HealthCheck,
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

    /// How the guard checks its upstream for `grpc.health.v1.Health`
    /// (default [`HealthCheck::default`]: every 5 s, 2 s timeout,
    /// `NOT_SERVING` after 3 failures).
    pub fn health_check(mut self, check: HealthCheck) -> Self {
        self.health = check;
        self
    }

    /// Bind, and serve in the background on the current tokio runtime.
    pub async fn start(self) -> Result<Guard, GuardError> {
        self.health.validate()?;
        let channel = self.upstream.build_channel()?;
        let reporter = HealthReporter::new();
        // NOT_SERVING until the upstream first answers.
        health::report(&reporter, ServingStatus::NotServing).await;
        let front = Front {
            proxy: self
                .layer
                .releases(Releases::CallerOnly)
                .layer(channel.clone()),
            health: HealthServer::new(HealthService::from_health_reporter(reporter.clone())),
        };
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
        let (stop, stopped) = oneshot::channel::<()>();
        let incoming = TcpListenerStream::new(listener);
        let task = tokio::spawn(async move {
            let served = tonic::transport::Server::builder()
                .tcp_nodelay(true)
                .serve_with_incoming_shutdown(front, incoming, async {
                    let _ = stopped.await;
                })
                .await;
            if let Err(e) = served {
                tracing::error!(error = %e, "spark-connect-guard: server failed");
            }
        });
        let checker = tokio::spawn(health::watch_upstream(channel, reporter, self.health));
        tracing::info!(%addr, "spark-connect-guard: listening");
        Ok(Guard {
            addr,
            stop: Some(stop),
            task: Some(task),
            checker: checker.abort_handle(),
        })
    }
}

/// A running guard. Dropping it stops it (in the background); call
/// [`shutdown`](Self::shutdown) to wait until it has stopped.
#[derive(Debug)]
pub struct Guard {
    addr: SocketAddr,
    stop: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<()>>,
    checker: tokio::task::AbortHandle,
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
            health: HealthCheck::default(),
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
        self.checker.abort();
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
        self.checker.abort();
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}
