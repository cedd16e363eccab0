//! FaultProxy against real loopback sockets: plain tokio TCP upstreams (a
//! source, an echo and a sink), so each fault is checked byte-exactly and
//! without a Spark server.

use std::io::ErrorKind;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use spark_connect_testkit::FaultProxy;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio::time::timeout;

// The theme's tests, one file each: tests/proxy/*.rs.
mod proxy {
    mod bandwidth;
    mod black_hole;
    mod cuts;
    mod delay;
    mod forwarding;
}

/// Every await on a socket is bounded so a bug fails the test instead of hanging it.
/// (Virtual under `start_paused`, so timer faults in those tests stay below it.)
const BOUND: Duration = Duration::from_secs(10);

fn pattern(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i % 251) as u8).collect()
}

/// Upstream that writes `len` pattern bytes to each connection, then closes.
async fn source(len: usize) -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = l.accept().await {
            tokio::spawn(async move {
                let _ = s.write_all(&pattern(len)).await;
                let _ = s.shutdown().await;
                // Keep the socket until the proxy closes it, so its reads end cleanly.
                let mut sink = Vec::new();
                let _ = s.read_to_end(&mut sink).await;
            });
        }
    });
    addr
}

/// Upstream that echoes everything back.
async fn echo() -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = l.accept().await {
            tokio::spawn(async move {
                let (mut r, mut w) = s.split();
                let _ = tokio::io::copy(&mut r, &mut w).await;
            });
        }
    });
    addr
}

/// Upstream that reads each connection to its end and reports how many bytes
/// it got; also counts accepted connections.
async fn sink() -> (SocketAddr, mpsc::UnboundedReceiver<u64>, Arc<AtomicU64>) {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let (tx, rx) = mpsc::unbounded_channel();
    let accepted = Arc::new(AtomicU64::new(0));
    let counter = accepted.clone();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = l.accept().await {
            counter.fetch_add(1, Ordering::SeqCst);
            let tx = tx.clone();
            tokio::spawn(async move {
                let mut buf = vec![0u8; 64 * 1024];
                let mut total = 0u64;
                while let Ok(n) = s.read(&mut buf).await {
                    if n == 0 {
                        break;
                    }
                    total += n as u64;
                }
                let _ = tx.send(total);
            });
        }
    });
    (addr, rx, accepted)
}

/// Read until end of stream or error; returns the bytes and the error kind (None on EOF).
async fn read_all(s: &mut TcpStream) -> (Vec<u8>, Option<ErrorKind>) {
    let mut out = Vec::new();
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        match timeout(BOUND, s.read(&mut buf)).await.expect("read hung") {
            Ok(0) => return (out, None),
            Ok(n) => out.extend_from_slice(&buf[..n]),
            Err(e) => return (out, Some(e.kind())),
        }
    }
}

async fn connect(proxy: &FaultProxy) -> TcpStream {
    timeout(BOUND, TcpStream::connect(proxy.local_addr()))
        .await
        .unwrap()
        .unwrap()
}

/// Reads the first byte through `c` and checks it took at least `min`
/// (on the test's clock) from `t0`.
async fn first_byte_after(c: &mut TcpStream, t0: tokio::time::Instant, min: Duration) -> u8 {
    let mut first = [0u8; 1];
    timeout(BOUND, c.read_exact(&mut first))
        .await
        .expect("read hung")
        .unwrap();
    assert!(t0.elapsed() >= min, "{:?}", t0.elapsed());
    first[0]
}

async fn echo_roundtrip(s: &mut TcpStream, msg: &[u8]) {
    s.write_all(msg).await.unwrap();
    let mut back = vec![0u8; msg.len()];
    timeout(BOUND, s.read_exact(&mut back))
        .await
        .expect("echo hung")
        .unwrap();
    assert_eq!(back, msg);
}
