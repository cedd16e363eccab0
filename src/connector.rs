//! [`Connector`]: how a channel reaches the server, chosen by the program.
//!
//! *Why:* a session dials TCP to the connection string's host by default,
//! but programs reach Spark in other ways: a Unix socket, an SSH tunnel, an
//! egress proxy, or a simulated network in a test. tonic takes any tower
//! `Service<Uri>` that yields a connected stream
//! ([`Endpoint::connect_with_connector_lazy`](tonic::transport::Endpoint::connect_with_connector_lazy));
//! a `Connector` is one such service, boxed, so a builder can hold it and
//! dial it again for a fresh connection. TLS, when the connection string
//! asks for it, still runs over the stream it yields.

use std::fmt;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use http::Uri;
use hyper::rt::{Read, ReadBufCursor, Write};
use tower::util::BoxCloneSyncService;
use tower::{Service, ServiceExt};

use tonic_retry::transport::BoxError;

/// A connected stream: what a [`Connector`] yields.
trait Io: Read + Write + Send + Unpin {}

impl<T: Read + Write + Send + Unpin> Io for T {}

/// The stream a [`Connector`] yields, boxed.
pub struct Connection(Box<dyn Io>);

impl fmt::Debug for Connection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Connection")
    }
}

impl Read for Connection {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: ReadBufCursor<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut *self.0).poll_read(cx, buf)
    }
}

impl Write for Connection {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut *self.0).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut *self.0).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut *self.0).poll_shutdown(cx)
    }

    fn is_write_vectored(&self) -> bool {
        self.0.is_write_vectored()
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut *self.0).poll_write_vectored(cx, bufs)
    }
}

/// How a channel reaches the server: any tower `Service<Uri>` that yields a
/// connected stream (hyper's `Read + Write`; wrap a tokio stream in
/// `hyper_util::rt::TokioIo`). Cheap to clone; each fresh connection calls
/// it again with the server's URI.
///
/// ```
/// use spark_connect_retry::connector::Connector;
///
/// // A connector that refuses every connection, so the example dials nothing.
/// let connector = Connector::new(tower::service_fn(|uri: http::Uri| async move {
///     Err::<tokio::io::DuplexStream, _>(std::io::Error::other(format!("no route to {uri}")))
///         .map(hyper_util::rt::TokioIo::new)
/// }));
/// assert_eq!(format!("{connector:?}"), "Connector");
/// ```
#[derive(Clone)]
pub struct Connector(BoxCloneSyncService<Uri, Connection, BoxError>);

impl fmt::Debug for Connector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Connector")
    }
}

impl Connector {
    /// A connector from any service that dials a URI.
    pub fn new<C>(connector: C) -> Self
    where
        C: Service<Uri> + Clone + Send + Sync + 'static,
        C::Response: Read + Write + Send + Unpin + 'static,
        C::Future: Send + 'static,
        C::Error: Into<BoxError>,
    {
        let boxed = connector
            .map_response(|io| Connection(Box::new(io)))
            .map_err(Into::into);
        Connector(BoxCloneSyncService::new(boxed))
    }
}

impl Service<Uri> for Connector {
    type Response = Connection;
    type Error = BoxError;
    type Future = <BoxCloneSyncService<Uri, Connection, BoxError> as Service<Uri>>::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.0.poll_ready(cx)
    }

    fn call(&mut self, uri: Uri) -> Self::Future {
        self.0.call(uri)
    }
}
