//! Latency and one-way delay: bytes intact and in order, each delay paid where it should be.

use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use spark_connect_testkit::Direction;
use spark_connect_testkit::FaultProxy;
use tokio::time::Instant;
use tokio::time::timeout;

use crate::{BOUND, connect, echo, echo_roundtrip, first_byte_after, pattern, read_all, source};

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
    assert_eq!(proxy.stats_handle().bytes(Direction::ServerToClient), 400);
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
    assert_eq!(
        proxy.stats_handle().bytes(Direction::ServerToClient),
        len as u64
    );

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
    assert_eq!(proxy.stats_handle().bytes(Direction::ServerToClient), 400);
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
    let first = first_byte_after(&mut c, t0, Duration::from_secs(1)).await;
    let (rest, err) = read_all(&mut c).await;
    assert_eq!(err, None);
    assert_eq!(rest.len() + 1, len);
    assert!([first][..] == pattern(1)[..] && rest[..] == pattern(len)[1..]);
}
