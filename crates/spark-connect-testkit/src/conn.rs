//! Accepted TCP connections that a handler can reset on purpose.
//!
//! tonic puts a transport's `Connected::ConnectInfo` into every request's
//! extensions, so each connection carries a [`KillSwitch`] there. Tripping it
//! makes the wrapped socket set `SO_LINGER 0` and close on its next poll,
//! which sends a real TCP RST, and makes every later read/write fail.

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

/// A server-side TCP connection that can be reset by its [`KillSwitch`].
#[derive(Debug)]
pub(crate) struct KillableTcp {
    inner: Option<TcpStream>,
    state: Arc<KillState>,
}

impl KillableTcp {
    pub(crate) fn new(stream: TcpStream, registry: &Connections) -> Self {
        // Small writes (one response) should leave at once; tests measure
        // what the client saw before a cut.
        let _ = stream.set_nodelay(true);
        let state = Arc::new(KillState::default());
        registry.register(&state);
        KillableTcp {
            inner: Some(stream),
            state,
        }
    }

    /// Returns the stream unless the switch was tripped; on the first poll
    /// after a trip, closes the socket with `SO_LINGER 0` (an RST).
    fn live(&mut self) -> io::Result<&mut TcpStream> {
        if self.state.killed.load(Ordering::SeqCst) {
            if let Some(stream) = self.inner.take() {
                let _ = stream.set_zero_linger();
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

impl Connected for KillableTcp {
    type ConnectInfo = KillSwitch;

    fn connect_info(&self) -> KillSwitch {
        KillSwitch(self.state.clone())
    }
}

impl AsyncRead for KillableTcp {
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

impl AsyncWrite for KillableTcp {
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
