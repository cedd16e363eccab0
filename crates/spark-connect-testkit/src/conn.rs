//! Accepted connections that a handler can reset on purpose.
//!
//! tonic puts a transport's `Connected::ConnectInfo` into every request's
//! extensions, so each connection carries a [`KillSwitch`] there. Tripping it
//! makes the wrapped connection close on its next poll and every later
//! read/write fail. A tokio `TcpStream` first sets `SO_LINGER 0`, so the
//! close sends a real TCP RST; any other transport (a simulated network's
//! stream, given to [`TestServerBuilder::serve_incoming`]) is dropped, which
//! is whatever that transport does on a close (turmoil sends an RST when
//! unread data is left, a FIN otherwise).
//!
//! [`TestServerBuilder::serve_incoming`]: crate::TestServerBuilder::serve_incoming

use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::task::{Context, Poll};

use futures_util::task::AtomicWaker;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tonic::transport::server::Connected;

use crate::faults::lock;

#[derive(Debug, Default)]
pub(crate) struct KillState {
    killed: AtomicBool,
    read_waker: AtomicWaker,
    write_waker: AtomicWaker,
}

/// A handle that resets one connection. Found in request extensions.
#[derive(Debug, Clone)]
pub(crate) struct KillSwitch(Arc<KillState>);

impl KillSwitch {
    pub(crate) fn kill(&self) {
        self.0.killed.store(true, Ordering::SeqCst);
        // Wake the connection task so the socket is closed right away rather
        // than at its next I/O event.
        self.0.read_waker.wake();
        self.0.write_waker.wake();
    }
}

/// The live connections of a server, to reset them all at once.
#[derive(Debug, Default)]
pub(crate) struct Connections(Mutex<Vec<Weak<KillState>>>);

impl Connections {
    fn register(&self, state: &Arc<KillState>) {
        let mut conns = lock(&self.0);
        conns.retain(|w| w.strong_count() > 0);
        conns.push(Arc::downgrade(state));
    }

    pub(crate) fn kill_all(&self) -> usize {
        let conns = lock(&self.0);
        let mut n = 0;
        for state in conns.iter().filter_map(Weak::upgrade) {
            if !state.killed.load(Ordering::SeqCst) {
                KillSwitch(state).kill();
                n += 1;
            }
        }
        n
    }
}

/// A server-side connection that can be reset by its [`KillSwitch`]: a
/// tokio `TcpStream` (the default), or any stream a caller serves on.
pub(crate) struct Killable<IO = TcpStream> {
    inner: Option<IO>,
    state: Arc<KillState>,
    /// Run on the stream just before it is dropped by a kill.
    before_close: fn(&IO),
}

impl<IO> std::fmt::Debug for Killable<IO> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Killable")
            .field("open", &self.inner.is_some())
            .field("killed", &self.state.killed.load(Ordering::SeqCst))
            .finish()
    }
}

impl Killable<TcpStream> {
    /// A loopback TCP connection: no Nagle delay, and an RST when killed.
    pub(crate) fn tcp(stream: TcpStream, registry: &Connections) -> Self {
        // Small writes (one response) should leave at once; tests measure
        // what the client saw before a cut.
        let _ = stream.set_nodelay(true);
        Self::with_close(stream, registry, |s| {
            let _ = s.set_zero_linger();
        })
    }
}

impl<IO> Killable<IO> {
    /// Any other transport: a kill drops it.
    pub(crate) fn other(stream: IO, registry: &Connections) -> Self {
        Self::with_close(stream, registry, |_| {})
    }

    fn with_close(stream: IO, registry: &Connections, before_close: fn(&IO)) -> Self {
        let state = Arc::new(KillState::default());
        registry.register(&state);
        Killable {
            inner: Some(stream),
            state,
            before_close,
        }
    }

    /// Returns the stream unless the switch was tripped; on the first poll
    /// after a trip, closes it (a TCP socket with `SO_LINGER 0`: an RST).
    fn live(&mut self) -> io::Result<&mut IO> {
        if self.state.killed.load(Ordering::SeqCst) {
            if let Some(stream) = self.inner.take() {
                (self.before_close)(&stream);
                drop(stream);
            }
            return Err(io::Error::new(
                io::ErrorKind::ConnectionReset,
                "connection reset by the test server's fault injection",
            ));
        }
        self.inner
            .as_mut()
            .ok_or_else(|| io::Error::from(io::ErrorKind::NotConnected))
    }
}

impl<IO> Connected for Killable<IO> {
    type ConnectInfo = KillSwitch;

    fn connect_info(&self) -> KillSwitch {
        KillSwitch(self.state.clone())
    }
}

impl<IO: AsyncRead + Unpin> AsyncRead for Killable<IO> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        // Register before checking the flag so a concurrent kill wakes us.
        this.state.read_waker.register(cx.waker());
        match this.live() {
            Ok(s) => Pin::new(s).poll_read(cx, buf),
            Err(e) => Poll::Ready(Err(e)),
        }
    }
}

impl<IO: AsyncWrite + Unpin> AsyncWrite for Killable<IO> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        this.state.write_waker.register(cx.waker());
        match this.live() {
            Ok(s) => Pin::new(s).poll_write(cx, buf),
            Err(e) => Poll::Ready(Err(e)),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        this.state.write_waker.register(cx.waker());
        match this.live() {
            Ok(s) => Pin::new(s).poll_flush(cx),
            Err(e) => Poll::Ready(Err(e)),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        match this.live() {
            Ok(s) => Pin::new(s).poll_shutdown(cx),
            Err(e) => Poll::Ready(Err(e)),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        this.state.write_waker.register(cx.waker());
        match this.live() {
            Ok(s) => Pin::new(s).poll_write_vectored(cx, bufs),
            Err(e) => Poll::Ready(Err(e)),
        }
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.as_ref().is_some_and(|s| s.is_write_vectored())
    }
}
