//! [`Guard`]: a running guard, and the [`GuardBuilder`] that starts it.

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use spark_connect_retry::layer::{ReattachLayer, Releases};
use spark_connect_retry::session::{Http2FlowControl, SparkSessionBuilder};
use spark_connect_retry::transport::{GrpcChannel, grpc_channel};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tokio_stream::wrappers::TcpListenerStream;
use tokio_stream::{Stream, StreamExt};
use tokio_util::sync::CancellationToken;
use tonic::transport::server::Connected;
use tonic_health::ServingStatus;
use tonic_health::pb::health_server::HealthServer;
use tonic_health::server::{HealthReporter, HealthService};
use tower::Layer;

use crate::error::GuardError;
use crate::front::Front;
use crate::health::{self, HealthCheck};
use crate::io::GuardIo;
use crate::stats::{ConnectionOpen, Counters, GuardStats};
use crate::tls::GuardTls;
use crate::token::ClientToken;

/// How long a drain lets open streams run before it ends them with
/// UNAVAILABLE: 25 s.
///
/// *Why 25 s:* a drain must end before the supervisor's kill. Kubernetes
/// sends SIGKILL 30 s after SIGTERM by default
/// (`terminationGracePeriodSeconds`), systemd 90 s (`TimeoutStopSec`); 25 s
/// leaves 5 s for the statuses to reach the clients and the process to
/// exit. Nothing is lost past it: a stream ended with UNAVAILABLE resumes
/// on the next guard (the guard releases nothing), so the drain only saves
/// short calls a reattach, and most interactive calls end within seconds.
pub(crate) const DEFAULT_DRAIN_TIMEOUT: Duration = Duration::from_secs(25);

/// After the drain timeout and the UNAVAILABLE statuses, how long
/// connections get to close before they are closed under the clients.
const DRAIN_GRACE: Duration = Duration::from_secs(5);

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

/// Starts a [`Guard`].
#[derive(Debug)]
#[must_use]
pub struct GuardBuilder {
    upstream: SparkSessionBuilder,
    listen: SocketAddr,
    layer: ReattachLayer,
    health: HealthCheck,
    drain_timeout: Duration,
    tls: Option<GuardTls>,
    client_token: Option<ClientToken>,
    #[cfg(feature = "metrics")]
    metrics_listen: Option<SocketAddr>,
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

    /// Reach the upstream through this HTTP CONNECT proxy
    /// (`http://[user:password@]host:port`) instead of the one
    /// `HTTPS_PROXY` / `ALL_PROXY` / `NO_PROXY` choose, as
    /// [`SparkSessionBuilder::egress_proxy`] does. A URL that cannot be
    /// used fails [`start`](Self::start) with an error that never contains
    /// it.
    pub fn egress_proxy(mut self, url: impl Into<String>) -> Self {
        self.upstream = self.upstream.egress_proxy(url);
        self
    }

    /// Reach the upstream directly, whatever `HTTPS_PROXY` says.
    pub fn no_egress_proxy(mut self) -> Self {
        self.upstream = self.upstream.no_egress_proxy();
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

    /// How long [`Guard::drain`] lets open streams run before it ends them
    /// with UNAVAILABLE (default 25 s: Kubernetes kills 30 s after SIGTERM; zero ends
    /// them at once).
    pub fn drain_timeout(mut self, timeout: Duration) -> Self {
        self.drain_timeout = timeout;
        self
    }

    /// Serve TLS (and mTLS, if `tls` has a client CA) instead of
    /// plaintext.
    pub fn tls(mut self, tls: GuardTls) -> Self {
        self.tls = Some(tls);
        self
    }

    /// Require every call (health checks excepted) to present this token
    /// as `authorization: Bearer <token>`; others get UNAUTHENTICATED. The
    /// client's token is removed before the call goes upstream.
    pub fn client_token(mut self, token: ClientToken) -> Self {
        self.client_token = Some(token);
        self
    }

    /// Serve the guard's counts for Prometheus at `http://ADDR/metrics`
    /// (OpenMetrics text; off unless asked for). Labels are bounded: a
    /// Spark Connect method name and a gRPC status code name, never an
    /// operation or session id.
    #[cfg(feature = "metrics")]
    pub fn metrics_listen(mut self, addr: SocketAddr) -> Self {
        self.metrics_listen = Some(addr);
        self
    }

    /// Bind, and serve in the background on the current tokio runtime.
    pub async fn start(mut self) -> Result<Guard, GuardError> {
        self.health.validate()?;
        let channel = std::mem::take(&mut self.upstream).build_channel()?;
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
        // Nagle is off on each accepted socket.
        let incoming = TcpListenerStream::new(listener).map(|tcp| {
            tcp.inspect(|tcp| {
                let _ = tcp.set_nodelay(true);
            })
        });
        self.serve(addr, channel, incoming).await
    }

    /// Serves on the connections `incoming` yields, towards `upstream`,
    /// instead of binding [`listen`](Self::listen) and connecting by the
    /// [`upstream`](Self::upstream) connection string (neither is used):
    /// for transports the guard does not open itself, such as a simulated
    /// network. `addr` is what [`Guard::local_addr`] reports. Give
    /// `upstream` the guard's flow control (HTTP/2 windows of 1 MiB per
    /// stream and 32 MiB per connection) unless the server keeps more than
    /// 10 MiB for reattaches. Health checks, the drain, TLS, the client
    /// token and metrics work as with [`start`](Self::start).
    pub async fn serve_incoming<I, IO, IE>(
        self,
        addr: SocketAddr,
        upstream: tonic::transport::Channel,
        incoming: I,
    ) -> Result<Guard, GuardError>
    where
        I: Stream<Item = Result<IO, IE>> + Send + 'static,
        IO: AsyncRead + AsyncWrite + Connected + Unpin + Send + 'static,
        IE: Into<Box<dyn std::error::Error + Send + Sync>>,
    {
        self.health.validate()?;
        self.serve(addr, grpc_channel(upstream), incoming).await
    }

    /// Serves the guard's service on `incoming`, in tasks of the current
    /// runtime.
    async fn serve<I, IO, IE>(
        self,
        addr: SocketAddr,
        channel: GrpcChannel,
        incoming: I,
    ) -> Result<Guard, GuardError>
    where
        I: Stream<Item = Result<IO, IE>> + Send + 'static,
        IO: AsyncRead + AsyncWrite + Connected + Unpin + Send + 'static,
        IE: Into<Box<dyn std::error::Error + Send + Sync>>,
    {
        let reporter = HealthReporter::new();
        let counters = Arc::new(Counters::default());
        let cut = CancellationToken::new();
        let kill = CancellationToken::new();
        // NOT_SERVING until the upstream first answers.
        health::report(&reporter, &counters, ServingStatus::NotServing).await;
        let front = Front {
            proxy: self
                .layer
                .releases(Releases::CallerOnly)
                .layer(channel.clone()),
            health: HealthServer::new(HealthService::from_health_reporter(reporter.clone())),
            cut: cut.clone(),
            counters: counters.clone(),
            token: self.client_token.map(Arc::new),
        };
        let mut server = tonic::transport::Server::builder();
        if let Some(tls) = &self.tls {
            server = server
                .tls_config(tls.server_config())
                .map_err(|e| GuardError::Tls {
                    what: "configuration",
                    source_name: "the certificate and key given".into(),
                    reason: e.to_string(),
                })?;
        }
        let (stop, stopped) = oneshot::channel::<()>();
        let (killer, open) = (kill.clone(), counters.clone());
        let incoming = incoming.map(move |io| {
            io.map(|io| GuardIo::new(io, &killer, ConnectionOpen::new(open.clone())))
        });
        let task = tokio::spawn(async move {
            let served = server
                .serve_with_incoming_shutdown(front, incoming, async {
                    let _ = stopped.await;
                })
                .await;
            if let Err(e) = served {
                tracing::error!(error = %e, "spark-connect-guard: server failed");
            }
        });
        let checker = tokio::spawn(health::watch_upstream(
            channel,
            reporter.clone(),
            self.health,
            counters.clone(),
        ));
        #[cfg(feature = "metrics")]
        let metrics = match self.metrics_listen {
            Some(addr) => {
                let (bound, task) = crate::metrics::start(addr, counters.clone()).await?;
                Some((bound, task.abort_handle()))
            }
            None => None,
        };
        #[cfg(not(feature = "metrics"))]
        let metrics = None;
        tracing::info!(%addr, "spark-connect-guard: listening");
        Ok(Guard {
            addr,
            stop: Some(stop),
            task: Some(task),
            checker: checker.abort_handle(),
            reporter,
            cut,
            kill,
            counters,
            drain_timeout: self.drain_timeout,
            metrics,
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
    reporter: HealthReporter,
    cut: CancellationToken,
    kill: CancellationToken,
    counters: Arc<Counters>,
    drain_timeout: Duration,
    metrics: Option<(SocketAddr, tokio::task::AbortHandle)>,
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
            drain_timeout: DEFAULT_DRAIN_TIMEOUT,
            tls: None,
            client_token: None,
            #[cfg(feature = "metrics")]
            metrics_listen: None,
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

    /// Where the metrics endpoint listens, if one was asked for
    /// ([`GuardBuilder::metrics_listen`]).
    pub fn metrics_addr(&self) -> Option<SocketAddr> {
        self.metrics.as_ref().map(|(addr, _)| *addr)
    }

    fn stop_metrics(&mut self) {
        if let Some((_, task)) = self.metrics.take() {
            task.abort();
        }
    }

    /// What the guard counted so far.
    pub fn stats(&self) -> GuardStats {
        self.counters.snapshot()
    }

    /// A bounded drain, as on SIGTERM: report `NOT_SERVING`, stop
    /// accepting (the port is free again at once), let open streams run up
    /// to the drain timeout ([`GuardBuilder::drain_timeout`]), then end each
    /// remaining one with UNAVAILABLE, a status clients reattach on. The
    /// guard releases nothing upstream, so a client that reattaches to
    /// another guard at the same address (or any address reaching the same
    /// server) continues exactly. Returns the counts as of the end
    /// ([`GuardStats::cut_by_drain`]: the streams it ended).
    pub async fn drain(mut self) -> GuardStats {
        self.checker.abort();
        health::report(&self.reporter, &self.counters, ServingStatus::NotServing).await;
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(mut task) = self.task.take()
            && tokio::time::timeout(self.drain_timeout, &mut task)
                .await
                .is_err()
        {
            let open = self.counters.snapshot().open_calls;
            tracing::info!(
                open,
                "spark-connect-guard: drain timeout: ending open streams with UNAVAILABLE"
            );
            self.cut.cancel();
            if tokio::time::timeout(DRAIN_GRACE, &mut task).await.is_err() {
                self.kill.cancel();
                task.abort();
                let _ = task.await;
            }
        }
        self.stop_metrics();
        self.counters.snapshot()
    }

    /// Stop at once, as if the process died: close the port and every
    /// client connection without a status. Clients that reattach by
    /// themselves see a broken connection and reattach (the guard releases
    /// nothing upstream). For tests and last resorts; prefer
    /// [`drain`](Self::drain).
    pub async fn abort(mut self) {
        self.checker.abort();
        self.stop_metrics();
        self.stop.take();
        self.kill.cancel();
        if let Some(task) = self.task.take() {
            task.abort();
            let _ = task.await;
        }
    }

    /// [`drain`](Self::drain), and wait until it has stopped.
    pub async fn shutdown(self) {
        let _ = self.drain().await;
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        self.checker.abort();
        self.stop_metrics();
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}
