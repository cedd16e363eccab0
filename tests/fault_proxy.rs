//! FaultProxy against real loopback sockets: plain tokio TCP upstreams (a
//! source, an echo and a sink), so each fault is checked byte-exactly and
//! without a Spark server.

use std::io::ErrorKind;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use spark_connect_testkit::proxy::{
    AddrRole, CutMode, CutReason, CutSchedule, Direction, FaultProxy, FaultProxyError,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio::time::{Instant, timeout};

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

async fn echo_roundtrip(s: &mut TcpStream, msg: &[u8]) {
    s.write_all(msg).await.unwrap();
    let mut back = vec![0u8; msg.len()];
    timeout(BOUND, s.read_exact(&mut back))
        .await
        .expect("echo hung")
        .unwrap();
    assert_eq!(back, msg);
}

#[tokio::test]
async fn cuts_server_to_client_with_rst_at_exact_offset() {
    let up = source(1 << 20).await;
    let proxy = FaultProxy::builder(up)
        .cut_after_bytes(Direction::ServerToClient, 12_345)
        .start()
        .await
        .unwrap();
    let mut c = connect(&proxy).await;
    let (got, err) = read_all(&mut c).await;
    assert_eq!(err, Some(ErrorKind::ConnectionReset));
    assert_eq!(got, pattern(12_345));

    let stats = proxy.stats().snapshot();
    assert_eq!(stats.cuts, 1);
    assert_eq!(stats.bytes_server_to_client, 12_345);
    let events = proxy.stats().cut_events();
    assert_eq!(events.len(), 1);
    assert_eq!(
        events[0].reason,
        CutReason::Bytes(Direction::ServerToClient)
    );
    assert_eq!(events[0].server_to_client, 12_345);
    assert_eq!(events[0].connection, 0);
}

#[tokio::test]
async fn cuts_server_to_client_with_fin_as_clean_eof() {
    let up = source(1 << 20).await;
    let proxy = FaultProxy::builder(up)
        .cut_after_bytes(Direction::ServerToClient, 70_000)
        .cut_mode(CutMode::Fin)
        .start()
        .await
        .unwrap();
    let mut c = connect(&proxy).await;
    let (got, err) = read_all(&mut c).await;
    assert_eq!(err, None, "FIN must read as a clean end of stream");
    assert_eq!(got, pattern(70_000));
    assert_eq!(proxy.stats().cuts(), 1);
}

#[tokio::test]
async fn cuts_client_to_server_at_exact_offset() {
    let (up, mut totals, _) = sink().await;
    let proxy = FaultProxy::builder(up)
        .cut_after_bytes(Direction::ClientToServer, 5_000)
        .cut_mode(CutMode::Fin)
        .start()
        .await
        .unwrap();
    let mut c = connect(&proxy).await;
    // The write may or may not fail depending on how much the kernel buffered.
    let _ = c.write_all(&pattern(1 << 20)).await;
    let upstream_got = timeout(BOUND, totals.recv()).await.unwrap().unwrap();
    assert_eq!(upstream_got, 5_000);
    assert_eq!(proxy.stats().bytes(Direction::ClientToServer), 5_000);
    let (_, err) = read_all(&mut c).await;
    // FIN first; the drain may end in a reset once we stop reading the
    // client's remaining bytes, so only check the client learns it is over.
    assert!(matches!(err, None | Some(ErrorKind::ConnectionReset)));
    assert_eq!(
        proxy.stats().cut_events()[0].reason,
        CutReason::Bytes(Direction::ClientToServer)
    );
}

#[tokio::test]
async fn client_to_server_rst_cut_resets_both_sides() {
    let (up, mut totals, _) = sink().await;
    let proxy = FaultProxy::builder(up)
        .cut_after_bytes(Direction::ClientToServer, 100)
        .start()
        .await
        .unwrap();
    let mut c = connect(&proxy).await;
    c.write_all(&pattern(300)).await.unwrap();
    let (got, err) = read_all(&mut c).await;
    assert!(got.is_empty());
    assert_eq!(err, Some(ErrorKind::ConnectionReset));
    // The sink reads the 100 bytes, then sees the reset as an error.
    assert_eq!(timeout(BOUND, totals.recv()).await.unwrap().unwrap(), 100);
}

#[tokio::test]
async fn refuses_first_connections_with_reset() {
    let up = echo().await;
    let proxy = FaultProxy::builder(up)
        .refuse_first(2)
        .start()
        .await
        .unwrap();
    for _ in 0..2 {
        let mut c = connect(&proxy).await;
        let (got, err) = read_all(&mut c).await;
        assert!(got.is_empty());
        assert_eq!(err, Some(ErrorKind::ConnectionReset));
    }
    let mut c = connect(&proxy).await;
    echo_roundtrip(&mut c, b"hello after refusals").await;
    let s = proxy.stats().snapshot();
    assert_eq!((s.connections, s.refused, s.cuts), (3, 2, 0));
}

#[tokio::test]
async fn max_cuts_then_forwards_cleanly() {
    let up = source(200_000).await;
    let proxy = FaultProxy::builder(up)
        .cut_after_bytes(Direction::ServerToClient, 1_000)
        .max_cuts(2)
        .start()
        .await
        .unwrap();
    for _ in 0..2 {
        let mut c = connect(&proxy).await;
        let (got, err) = read_all(&mut c).await;
        assert_eq!((got.len(), err), (1_000, Some(ErrorKind::ConnectionReset)));
    }
    for _ in 0..2 {
        let mut c = connect(&proxy).await;
        let (got, err) = read_all(&mut c).await;
        assert_eq!(err, None);
        assert_eq!(got, pattern(200_000));
    }
    let s = proxy.stats().snapshot();
    assert_eq!(s.cuts, 2);
    assert_eq!(s.connections, 4);
    assert_eq!(s.bytes_server_to_client, 2 * 1_000 + 2 * 200_000);
}

#[test]
fn seeded_schedules_are_reproducible() {
    let a = CutSchedule::seeded(7, 20, 1..=100_000);
    assert_eq!(a, CutSchedule::seeded(7, 20, 1..=100_000));
    assert_ne!(a, CutSchedule::seeded(8, 20, 1..=100_000));
    assert_eq!(a.offsets().len(), 20);
    assert!(a.offsets().iter().all(|o| (1..=100_000).contains(o)));
}

#[tokio::test]
async fn twenty_seeded_cut_schedules() {
    let up = source(64 * 1024).await;
    for seed in 0..20u64 {
        let schedule = CutSchedule::seeded(seed, 3, 1..=60_000);
        let proxy = FaultProxy::builder(up)
            .cut_schedule(Direction::ServerToClient, schedule.clone())
            .start()
            .await
            .unwrap();
        for &offset in schedule.offsets() {
            let mut c = connect(&proxy).await;
            let (got, err) = read_all(&mut c).await;
            assert_eq!(err, Some(ErrorKind::ConnectionReset), "seed {seed}");
            assert_eq!(got.len() as u64, offset, "seed {seed}");
        }
        // Past the schedule: clean.
        let mut c = connect(&proxy).await;
        let (got, err) = read_all(&mut c).await;
        assert_eq!((got.len(), err), (64 * 1024, None), "seed {seed}");
        let offsets: Vec<u64> = proxy
            .stats()
            .cut_events()
            .iter()
            .map(|e| e.server_to_client)
            .collect();
        assert_eq!(offsets, schedule.offsets(), "seed {seed}");
        proxy.shutdown().await;
    }
}

#[tokio::test(start_paused = true)]
async fn latency_is_applied_per_chunk_each_way() {
    let up = echo().await;
    let proxy = FaultProxy::builder(up)
        .latency(Duration::from_millis(250))
        .start()
        .await
        .unwrap();
    let mut c = connect(&proxy).await;
    let t0 = Instant::now();
    for i in 0..4u8 {
        echo_roundtrip(&mut c, &[i; 100]).await;
    }
    // Paused clock: 4 round trips x 2 directions x 250 ms of virtual time.
    let elapsed = t0.elapsed();
    assert!(elapsed >= Duration::from_secs(2), "{elapsed:?}");
    assert!(elapsed < Duration::from_secs(3), "{elapsed:?}");
    assert_eq!(proxy.stats().bytes(Direction::ServerToClient), 400);
}

#[tokio::test]
async fn one_way_delay_keeps_bytes_intact_and_in_order() {
    // Real time, a short delay: a large transfer one way, then many small
    // pieces both ways at once, each byte checked.
    let len = 8 * 1024 * 1024 + 17;
    let proxy = FaultProxy::builder(source(len).await)
        .one_way_delay(Duration::from_millis(5))
        .start()
        .await
        .unwrap();
    let mut c = connect(&proxy).await;
    c.shutdown().await.unwrap();
    let (got, err) = read_all(&mut c).await;
    assert_eq!(err, None);
    assert_eq!(got.len(), len);
    assert!(got == pattern(len), "bytes differ");
    assert_eq!(proxy.stats().bytes(Direction::ServerToClient), len as u64);

    let proxy = FaultProxy::builder(echo().await)
        .one_way_delay(Duration::from_millis(5))
        .start()
        .await
        .unwrap();
    let c = connect(&proxy).await;
    let (mut r, mut w) = c.into_split();
    // 8-byte words carrying their index: a reorder, loss or duplicate shows.
    let words = 256 * 1024u64;
    let writer = tokio::spawn(async move {
        for block in 0..words / 1024 {
            let bytes: Vec<u8> = (block * 1024..(block + 1) * 1024)
                .flat_map(u64::to_le_bytes)
                .collect();
            w.write_all(&bytes).await.unwrap();
        }
        w.shutdown().await.unwrap();
    });
    let mut back = Vec::new();
    timeout(BOUND, r.read_to_end(&mut back))
        .await
        .expect("echo hung")
        .unwrap();
    writer.await.unwrap();
    assert_eq!(back.len() as u64, words * 8);
    for (i, word) in back.chunks_exact(8).enumerate() {
        assert_eq!(u64::from_le_bytes(word.try_into().unwrap()), i as u64);
    }
}

#[tokio::test(start_paused = true)]
async fn one_way_delay_costs_each_round_trip_twice_the_delay() {
    let up = echo().await;
    let proxy = FaultProxy::builder(up)
        .one_way_delay(Duration::from_millis(250))
        .start()
        .await
        .unwrap();
    let mut c = connect(&proxy).await;
    let t0 = Instant::now();
    for i in 0..4u8 {
        echo_roundtrip(&mut c, &[i; 100]).await;
    }
    // Paused clock: 4 round trips x 2 directions x 250 ms of virtual time.
    let elapsed = t0.elapsed();
    assert!(elapsed >= Duration::from_secs(2), "{elapsed:?}");
    assert_eq!(proxy.stats().bytes(Direction::ServerToClient), 400);
}

#[tokio::test(start_paused = true)]
async fn one_way_delay_holds_the_first_byte_for_the_delay() {
    // A whole transfer through a 1 s one-way delay: nothing arrives before
    // the delay, and everything arrives intact.
    let len = 2 * 1024 * 1024;
    let proxy = FaultProxy::builder(source(len).await)
        .one_way_delay(Duration::from_secs(1))
        .start()
        .await
        .unwrap();
    let t0 = Instant::now();
    let mut c = connect(&proxy).await;
    let mut first = [0u8; 1];
    timeout(BOUND, c.read_exact(&mut first))
        .await
        .expect("read hung")
        .unwrap();
    assert!(t0.elapsed() >= Duration::from_secs(1), "{:?}", t0.elapsed());
    let (rest, err) = read_all(&mut c).await;
    assert_eq!(err, None);
    assert_eq!(rest.len() + 1, len);
    assert!(first[..] == pattern(1)[..] && rest[..] == pattern(len)[1..]);
}

#[tokio::test(start_paused = true)]
async fn cut_every_cuts_live_connections_on_a_timer() {
    let up = echo().await;
    let proxy = FaultProxy::builder(up)
        .cut_every(Duration::from_secs(5))
        .max_cuts(1)
        .start()
        .await
        .unwrap();
    let mut c = connect(&proxy).await;
    echo_roundtrip(&mut c, b"before the tick").await;
    let (_, err) = read_all(&mut c).await; // waits (virtually) for the tick
    assert_eq!(err, Some(ErrorKind::ConnectionReset));
    let events = proxy.stats().cut_events();
    assert_eq!(events.len(), 1);
    assert_eq!(events[0].reason, CutReason::Timer);
    assert_eq!(events[0].client_to_server, 15);

    // Budget spent: later ticks leave connections alone.
    let mut c = connect(&proxy).await;
    tokio::time::sleep(Duration::from_secs(12)).await;
    echo_roundtrip(&mut c, b"after the budget").await;
    assert_eq!(proxy.stats().cuts(), 1);
}

#[tokio::test(start_paused = true)]
async fn cut_after_lifetime() {
    let up = echo().await;
    let proxy = FaultProxy::builder(up)
        .cut_after(Duration::from_secs(5))
        .cut_mode(CutMode::Fin)
        .start()
        .await
        .unwrap();
    let mut c = connect(&proxy).await;
    let t0 = Instant::now();
    echo_roundtrip(&mut c, b"young connection").await;
    let (_, err) = read_all(&mut c).await;
    assert_eq!(err, None);
    assert!(t0.elapsed() >= Duration::from_secs(5));
    assert_eq!(proxy.stats().cut_events()[0].reason, CutReason::Lifetime);
}

#[tokio::test]
async fn cut_all_is_manual_and_counted() {
    let up = echo().await;
    let proxy = FaultProxy::builder(up).start().await.unwrap();
    let mut a = connect(&proxy).await;
    let mut b = connect(&proxy).await;
    echo_roundtrip(&mut a, b"a").await;
    echo_roundtrip(&mut b, b"b").await;
    proxy.cut_all();
    assert_eq!(read_all(&mut a).await.1, Some(ErrorKind::ConnectionReset));
    assert_eq!(read_all(&mut b).await.1, Some(ErrorKind::ConnectionReset));
    let events = proxy.stats().cut_events();
    assert_eq!(events.len(), 2);
    assert!(events.iter().all(|e| e.reason == CutReason::Manual));
    // New connections are unaffected.
    let mut c = connect(&proxy).await;
    echo_roundtrip(&mut c, b"c").await;
}

#[tokio::test]
async fn loses_first_request_before_upstream_sees_it() {
    let (up, _totals, accepted) = sink().await;
    let proxy = FaultProxy::builder(up)
        .lose_first_request(1_000)
        .start()
        .await
        .unwrap();
    let mut c = connect(&proxy).await;
    // Less than the threshold: nothing happens yet.
    c.write_all(&pattern(600)).await.unwrap();
    assert!(
        timeout(Duration::from_millis(200), c.read(&mut [0u8; 1]))
            .await
            .is_err()
    );
    c.write_all(&pattern(600)).await.unwrap();
    let (_, err) = read_all(&mut c).await;
    assert_eq!(err, Some(ErrorKind::ConnectionReset));
    assert_eq!(
        accepted.load(Ordering::SeqCst),
        0,
        "upstream must not see the lost request"
    );

    // The next connection is proxied.
    let mut c = connect(&proxy).await;
    c.write_all(b"second try").await.unwrap();
    c.shutdown().await.unwrap();
    let _ = read_all(&mut c).await;
    let s = proxy.stats().snapshot();
    assert_eq!(s.lost_requests, 1);
    assert_eq!(s.bytes_client_to_server, 10);
    assert_eq!(s.cuts, 0);
    assert_eq!(accepted.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn clean_forwarding_and_half_close() {
    let up = echo().await;
    let proxy = FaultProxy::builder(up).start().await.unwrap();
    let mut c = connect(&proxy).await;
    let data = pattern(300_000);
    let (mut r, mut w) = c.split();
    let writer = async {
        w.write_all(&data).await.unwrap();
        w.shutdown().await.unwrap();
    };
    let reader = async {
        let mut got = Vec::new();
        r.read_to_end(&mut got).await.unwrap();
        got
    };
    let ((), got) = timeout(BOUND, async { tokio::join!(writer, reader) })
        .await
        .unwrap();
    assert_eq!(got, data);
    let s = proxy.stats().snapshot();
    assert_eq!(s.bytes_client_to_server, 300_000);
    assert_eq!(s.bytes_server_to_client, 300_000);
    assert_eq!((s.connections, s.cuts), (1, 0));
}

#[tokio::test]
async fn refuses_non_loopback_addresses() {
    let err = FaultProxy::builder("10.1.2.3:15002".parse().unwrap())
        .start()
        .await
        .unwrap_err();
    assert!(matches!(
        err,
        FaultProxyError::NotLoopback {
            role: AddrRole::Upstream,
            ..
        }
    ));
    assert!(err.to_string().contains("10.1.2.3:15002"));

    let err = FaultProxy::builder("127.0.0.1:15002".parse().unwrap())
        .listen_addr("0.0.0.0:0".parse().unwrap())
        .start()
        .await
        .unwrap_err();
    assert!(matches!(
        err,
        FaultProxyError::NotLoopback {
            role: AddrRole::Listen,
            ..
        }
    ));

    // IPv6 loopback is fine (when the machine has it).
    if TcpListener::bind("[::1]:0").await.is_ok() {
        let p = FaultProxy::builder("[::1]:9".parse().unwrap())
            .listen_addr("[::1]:0".parse().unwrap())
            .start()
            .await
            .unwrap();
        assert!(p.local_addr().ip().is_loopback());
    }
}

#[tokio::test]
async fn unreachable_upstream_resets_client() {
    // Bind then drop to get a port with (very likely) nobody listening.
    let port = {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        l.local_addr().unwrap()
    };
    let proxy = FaultProxy::builder(port).start().await.unwrap();
    let mut c = connect(&proxy).await;
    assert_eq!(read_all(&mut c).await.1, Some(ErrorKind::ConnectionReset));
    assert_eq!(proxy.stats().snapshot().upstream_errors, 1);
}

#[tokio::test]
async fn shutdown_closes_live_connections_and_listener() {
    let up = echo().await;
    let proxy = FaultProxy::builder(up).start().await.unwrap();
    let addr = proxy.local_addr();
    assert_eq!(proxy.remote(), format!("sc://{addr}"));
    let mut c = connect(&proxy).await;
    echo_roundtrip(&mut c, b"x").await;
    let stats = proxy.stats();
    proxy.shutdown().await;
    let (_, err) = read_all(&mut c).await;
    assert!(matches!(err, None | Some(ErrorKind::ConnectionReset)));
    assert!(
        TcpStream::connect(addr).await.is_err(),
        "listener must be closed"
    );
    // Shutdown is not a cut.
    assert_eq!(stats.cuts(), 0);
}

#[test]
fn builder_for_remote_reads_loopback_connection_strings() {
    let ok = |r: &str| FaultProxy::builder_for_remote(r).unwrap();
    // The builder has no getter for its upstream; Debug shows it.
    let shows = |r: &str, addr: &str| {
        let dbg = format!("{:?}", ok(r));
        assert!(dbg.contains(addr), "{r}: {dbg}");
    };
    shows("sc://127.0.0.1:15002", "127.0.0.1:15002");
    shows(
        "sc://127.0.0.1:15005/;token=abc;use_ssl=false",
        "127.0.0.1:15005",
    );
    shows("sc://localhost:15003", "127.0.0.1:15003");
    shows("sc://localhost", "127.0.0.1:15002");
    shows("sc://[::1]:16000/", "[::1]:16000");
    shows("sc://[::1]", "[::1]:15002");
    for bad in [
        "http://127.0.0.1:15002",
        "sc://",
        "sc://spark.example:15002",
        "sc://1.2.3:x",
    ] {
        assert!(
            matches!(
                FaultProxy::builder_for_remote(bad),
                Err(FaultProxyError::InvalidRemote(_))
            ),
            "{bad}"
        );
    }
    assert!(matches!(
        FaultProxy::builder_for_remote("sc://192.168.1.10:15002"),
        Err(FaultProxyError::NotLoopback {
            role: AddrRole::Upstream,
            ..
        })
    ));
}

/// Waits (bounded) until the proxy has recorded `cuts` cuts.
async fn wait_for_cuts(proxy: &FaultProxy, cuts: u64) {
    timeout(BOUND, async {
        while proxy.stats().cuts() < cuts {
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
    let before = proxy.stats().snapshot();
    assert_eq!(before.bytes_server_to_client, 5_000);
    assert_eq!(before.bytes_client_to_server, 8_000);
    let events = proxy.stats().cut_events();
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
    let stats = proxy.stats();
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
    assert_eq!(proxy.stats().snapshot().bytes_client_to_server, 30_000);
    proxy.shutdown().await;
    let total = timeout(BOUND, totals.recv()).await.unwrap().unwrap();
    assert_eq!(
        total, 30_000,
        "the upstream got exactly the bytes before the hole"
    );
}
