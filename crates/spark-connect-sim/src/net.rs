//! turmoil's simulated TCP, as tonic's client and server want it: a
//! connector for an `Endpoint`, and an accept loop as a stream of
//! connections.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use futures_util::Stream;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tonic::transport::server::Connected;
use tonic::transport::{Channel, Endpoint};
use turmoil::net::{TcpListener, TcpStream};

/// The port every simulated service listens on.
pub const PORT: u16 = 15002;

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
        .http2_keep_alive_interval(Duration::from_secs(60))
        .keep_alive_timeout(Duration::from_secs(20))
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
