//! Black holes: a silent connection, no FIN or RST, in one or both directions.

use std::io::ErrorKind;
use std::sync::atomic::Ordering;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use spark_connect_testkit::CutMode;
use spark_connect_testkit::CutReason;
use spark_connect_testkit::CutSchedule;
use spark_connect_testkit::Direction;
use spark_connect_testkit::FaultProxy;
use tokio::net::TcpStream;
use tokio::time::timeout;

use crate::{BOUND, connect, echo, echo_roundtrip, pattern, read_all, sink};

/// Waits (bounded) until the proxy has recorded `cuts` cuts.
async fn wait_for_cuts(proxy: &FaultProxy, cuts: u64) {
    timeout(BOUND, async {
        while proxy.stats().cuts < cuts {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
    .expect("the cut was never recorded");
}

/// Reads exactly `n` bytes (bounded).
async fn read_n(s: &mut TcpStream, n: usize) -> Vec<u8> {
    let mut buf = vec![0u8; n];
    timeout(BOUND, s.read_exact(&mut buf))
        .await
        .expect("read hung")
        .unwrap();
    buf
}

/// The socket has neither bytes, nor an end of stream, nor an error to read.
fn assert_silent(s: &TcpStream) {
    let mut buf = [0u8; 1];
    match s.try_read(&mut buf) {
        Err(e) if e.kind() == ErrorKind::WouldBlock => {}
        other => panic!("a black hole must be silent, read {other:?}"),
    }
}

#[tokio::test]
async fn black_hole_stops_both_directions_without_fin_or_rst() {
    let up = echo().await;
    let proxy = FaultProxy::builder(up)
        .cut_schedule(Direction::ServerToClient, CutSchedule::new([5_000]))
        .cut_mode(CutMode::BlackHole)
        .start()
        .await
        .unwrap();
    let mut c = connect(&proxy).await;
    let msg = pattern(8_000);
    c.write_all(&msg).await.unwrap();
    // Exactly the scheduled offset comes back, then nothing.
    assert_eq!(read_n(&mut c, 5_000).await, msg[..5_000]);
    wait_for_cuts(&proxy, 1).await;
    assert_silent(&c);
    // Bytes written into the hole are never forwarded, and the socket stays
    // writable: no RST comes back.
    c.write_all(&pattern(1_000)).await.unwrap();
    tokio::task::yield_now().await;
    assert_silent(&c);
    let before = proxy.stats();
    assert_eq!(before.bytes_server_to_client, 5_000);
    assert_eq!(before.bytes_client_to_server, 8_000);
    let events = proxy.stats_handle().cut_events();
    assert_eq!(events.len(), 1);
    assert_eq!(
        events[0].reason,
        CutReason::Bytes(Direction::ServerToClient)
    );

    // The next connection is past the schedule: forwarded cleanly.
    let mut c2 = connect(&proxy).await;
    echo_roundtrip(&mut c2, b"after the hole").await;
    assert_silent(&c);

    // Only shutting the proxy down closes the held sockets.
    let stats = proxy.stats_handle();
    proxy.shutdown().await;
    let (got, err) = read_all(&mut c).await;
    assert!(got.is_empty(), "nothing may leak out of the hole");
    assert!(matches!(err, None | Some(ErrorKind::ConnectionReset)));
    assert_eq!(stats.snapshot().bytes_client_to_server, 8_000 + 14);
}

#[tokio::test]
async fn black_hole_client_to_server_holds_the_upstream_open() {
    let (up, mut totals, accepted) = sink().await;
    let proxy = FaultProxy::builder(up)
        .cut_after_bytes(Direction::ClientToServer, 30_000)
        .cut_mode(CutMode::BlackHole)
        .max_cuts(1)
        .start()
        .await
        .unwrap();
    let mut c = connect(&proxy).await;
    c.write_all(&pattern(100_000)).await.unwrap();
    wait_for_cuts(&proxy, 1).await;
    assert_silent(&c);
    // The upstream connection is still open: the sink has not reported a total.
    assert!(totals.try_recv().is_err(), "the upstream saw FIN or RST");
    assert_eq!(accepted.load(Ordering::SeqCst), 1);
    assert_eq!(proxy.stats().bytes_client_to_server, 30_000);
    proxy.shutdown().await;
    let total = timeout(BOUND, totals.recv()).await.unwrap().unwrap();
    assert_eq!(
        total, 30_000,
        "the upstream got exactly the bytes before the hole"
    );
}
