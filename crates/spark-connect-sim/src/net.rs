//! turmoil's simulated TCP, as tonic's client and server want it: a
//! connector for an `Endpoint`, a session's `Connector` that counts the
//! requests it writes, an accept loop as a stream of connections, and the
//! clients' request log.

use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use futures_util::Stream;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tonic::transport::server::Connected;
use tonic::transport::{Channel, Endpoint};
use turmoil::net::{TcpListener, TcpStream};

/// Every request the client sent, by RPC, at simulated time (and each
/// [`PUSHBACK`] it was answered).
pub type RequestLog = Arc<Mutex<Vec<(Duration, String)>>>;

/// The entry of a [`RequestLog`] for a `RESOURCE_EXHAUSTED` answered at once
/// (trailers only), not a request.
pub const PUSHBACK: &str = "answer RESOURCE_EXHAUSTED";

/// The port every simulated service listens on.
pub const PORT: u16 = 15002;

/// The HTTP/2 keepalive of [`channel`]: a ping after this long without a
/// frame received (the session's default, as `sc://` strings set it).
pub(crate) const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(60);

/// How long [`channel`]'s keepalive ping may go unanswered before the
/// connection is closed.
pub(crate) const KEEPALIVE_TIMEOUT: Duration = Duration::from_secs(20);

/// A simulated TCP connection that tonic's server accepts.
#[derive(Debug)]
pub struct SimStream(pub TcpStream);

impl Connected for SimStream {
    type ConnectInfo = ();

    fn connect_info(&self) {}
}

impl AsyncRead for SimStream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().0).poll_read(cx, buf)
    }
}

impl AsyncWrite for SimStream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().0).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().0).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().0).poll_shutdown(cx)
    }
}

/// Binds [`PORT`] on the current simulated host and yields each accepted
/// connection.
pub async fn incoming() -> io::Result<impl Stream<Item = io::Result<SimStream>> + Send + 'static> {
    let listener = TcpListener::bind(("0.0.0.0", PORT)).await?;
    Ok(futures_util::stream::unfold(
        listener,
        |listener| async move {
            let next = listener.accept().await.map(|(s, _)| SimStream(s));
            Some((next, listener))
        },
    ))
}

/// A lazy channel to `host`:[`PORT`] over simulated TCP, with the
/// session's default HTTP/2 keepalive (a ping every 60 s, 20 s to answer,
/// also without calls), as `sc://` connection strings set it. `windows`
/// sets the HTTP/2 receive windows (per stream, per connection).
///
/// *Why keepalive:* turmoil's TCP does not retransmit, so a connection that
/// lost a segment to a partition stays silent forever, as behind a
/// middlebox that dropped its state. Only the keepalive closes it, and only
/// then does tonic's channel connect afresh.
pub fn channel(host: &str, windows: Option<(u32, u32)>) -> Channel {
    let mut endpoint = Endpoint::from_shared(format!("http://{host}:{PORT}"))
        .expect("a valid URI")
        .tcp_nodelay(true)
        .http2_keep_alive_interval(KEEPALIVE_INTERVAL)
        .keep_alive_timeout(KEEPALIVE_TIMEOUT)
        .keep_alive_while_idle(true);
    if let Some((stream, conn)) = windows {
        endpoint = endpoint
            .initial_stream_window_size(stream)
            .initial_connection_window_size(conn);
    }
    endpoint.connect_with_connector_lazy(tower::service_fn(|uri: http::Uri| async move {
        let host = uri.host().unwrap_or_default().to_owned();
        let port = uri.port_u16().unwrap_or(PORT);
        TcpStream::connect((host.as_str(), port))
            .await
            .map(TokioIo::new)
    }))
}

/// The HTTP/2 client connection preface, before the first frame.
const PREFACE_LEN: usize = 24;

/// A client's simulated TCP connection that logs each request it sends:
/// each HEADERS frame written (a gRPC client sends one per request and no
/// trailers), at simulated time. Frames are read from their 9-byte
/// headers; nothing is decoded.
#[derive(Debug)]
pub struct CountingStream {
    inner: TcpStream,
    log: RequestLog,
    /// Bytes of the preface still to skip.
    preface: usize,
    /// The frame header being read.
    header: [u8; 9],
    have: usize,
    /// Payload bytes of the current frame still to skip.
    payload: usize,
}

impl CountingStream {
    fn new(inner: TcpStream, log: RequestLog) -> Self {
        CountingStream {
            inner,
            log,
            preface: PREFACE_LEN,
            header: [0; 9],
            have: 0,
            payload: 0,
        }
    }

    /// Follows the frames in `buf`, just written.
    fn written(&mut self, mut buf: &[u8]) {
        while !buf.is_empty() {
            if self.preface > 0 {
                let n = self.preface.min(buf.len());
                self.preface -= n;
                buf = &buf[n..];
            } else if self.payload > 0 {
                let n = self.payload.min(buf.len());
                self.payload -= n;
                buf = &buf[n..];
            } else {
                let n = (9 - self.have).min(buf.len());
                self.header[self.have..self.have + n].copy_from_slice(&buf[..n]);
                self.have += n;
                buf = &buf[n..];
                if self.have == 9 {
                    self.have = 0;
                    let h = self.header;
                    self.payload =
                        usize::from(h[0]) << 16 | usize::from(h[1]) << 8 | usize::from(h[2]);
                    // Type 0x1: HEADERS.
                    if h[3] == 0x1 {
                        let at = turmoil::sim_elapsed().unwrap_or_default();
                        self.log
                            .lock()
                            .unwrap_or_else(std::sync::PoisonError::into_inner)
                            .push((at, "request".to_owned()));
                    }
                }
            }
        }
    }
}

impl AsyncRead for CountingStream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_read(cx, buf)
    }
}

impl AsyncWrite for CountingStream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.inner).poll_write(cx, buf);
        if let Poll::Ready(Ok(n)) = polled {
            this.written(&buf[..n]);
        }
        polled
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}

/// A session's [`Connector`](spark_connect_retry::connector::Connector)
/// on simulated TCP: dials simulated host `host` at the URI's port from
/// the current simulated host (whatever host the URI names), logs each
/// request sent on the connection ([`CountingStream`]) and counts each
/// dial in `dials`.
pub fn connector(
    host: &'static str,
    log: RequestLog,
    dials: std::sync::Arc<std::sync::atomic::AtomicU64>,
) -> spark_connect_retry::connector::Connector {
    spark_connect_retry::connector::Connector::new(tower::service_fn(move |uri: http::Uri| {
        let log = log.clone();
        dials.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        async move {
            let port = uri.port_u16().unwrap_or(PORT);
            let stream = TcpStream::connect((host, port)).await?;
            Ok::<_, io::Error>(TokioIo::new(CountingStream::new(stream, log)))
        }
    }))
}
