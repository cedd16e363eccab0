//! Cuts: exact offsets each way, RST or FIN, refusals, seeded schedules, timed and manual cuts.

use std::io::ErrorKind;
use std::time::Duration;
use tokio::io::AsyncWriteExt;

use spark_connect_testkit::CutMode;
use spark_connect_testkit::CutReason;
use spark_connect_testkit::CutSchedule;
use spark_connect_testkit::Direction;
use spark_connect_testkit::FaultProxy;
use tokio::time::Instant;
use tokio::time::timeout;

use crate::{BOUND, connect, echo, echo_roundtrip, pattern, read_all, sink, source};

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

    let stats = proxy.stats();
    assert_eq!(stats.cuts, 1);
    assert_eq!(stats.bytes_server_to_client, 12_345);
    let events = proxy.stats_handle().cut_events();
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
    assert_eq!(proxy.stats().cuts, 1);
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
    assert_eq!(proxy.stats_handle().bytes(Direction::ClientToServer), 5_000);
    let (_, err) = read_all(&mut c).await;
    // FIN first; the drain may end in a reset once we stop reading the
    // client's remaining bytes, so only check the client learns it is over.
    assert!(matches!(err, None | Some(ErrorKind::ConnectionReset)));
    assert_eq!(
        proxy.stats_handle().cut_events()[0].reason,
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
    let s = proxy.stats();
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
    let s = proxy.stats();
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
            .stats_handle()
            .cut_events()
            .iter()
            .map(|e| e.server_to_client)
            .collect();
        assert_eq!(offsets, schedule.offsets(), "seed {seed}");
        proxy.shutdown().await;
    }
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
    let events = proxy.stats_handle().cut_events();
    assert_eq!(events.len(), 1);
    assert_eq!(events[0].reason, CutReason::Timer);
    assert_eq!(events[0].client_to_server, 15);

    // Budget spent: later ticks leave connections alone.
    let mut c = connect(&proxy).await;
    tokio::time::sleep(Duration::from_secs(12)).await;
    echo_roundtrip(&mut c, b"after the budget").await;
    assert_eq!(proxy.stats().cuts, 1);
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
    assert_eq!(
        proxy.stats_handle().cut_events()[0].reason,
        CutReason::Lifetime
    );
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
    let events = proxy.stats_handle().cut_events();
    assert_eq!(events.len(), 2);
    assert!(events.iter().all(|e| e.reason == CutReason::Manual));
    // New connections are unaffected.
    let mut c = connect(&proxy).await;
    echo_roundtrip(&mut c, b"c").await;
}
