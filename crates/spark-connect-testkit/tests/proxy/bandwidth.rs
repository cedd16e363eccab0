//! Bandwidth: each direction paced by its token bucket, bytes intact, and the
//! limit combined with a one-way delay.

use std::time::Duration;

use spark_connect_testkit::{Direction, FaultProxy};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::time::{Instant, timeout};

use crate::{BOUND, connect, first_byte_after, pattern, sink, source};

/// 8 Mbit/s: one byte per microsecond.
const RATE: u64 = 8_000_000;
/// The bucket's depth (one 64 KiB chunk), sent at once by an idle link.
const BURST: u64 = 64 * 1024;

/// Bytes a link at [`RATE`] may have delivered `elapsed` after it started.
fn allowed(elapsed: Duration) -> u64 {
    BURST + u64::try_from(elapsed.as_micros()).unwrap()
}

#[tokio::test(start_paused = true)]
async fn server_to_client_bytes_never_outrun_the_rate() {
    // Paused clock: every read is stamped with virtual time, so the bound
    // is exact whatever the machine's load.
    let len = 2 * 1024 * 1024;
    let proxy = FaultProxy::builder(source(len).await)
        .bandwidth(RATE)
        .start()
        .await
        .unwrap();
    let t0 = Instant::now();
    let mut c = connect(&proxy).await;
    let mut got = Vec::new();
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        let n = timeout(BOUND, c.read(&mut buf))
            .await
            .expect("read hung")
            .unwrap();
        if n == 0 {
            break;
        }
        got.extend_from_slice(&buf[..n]);
        let elapsed = t0.elapsed();
        let ok = allowed(elapsed);
        assert!(
            got.len() as u64 <= ok,
            "{} bytes after {elapsed:?} (at most {ok})",
            got.len()
        );
    }
    assert!(got == pattern(len), "bytes differ");
    // 2 MiB at 1 MB/s, less the burst: about 2 s of virtual time.
    let floor = Duration::from_micros(len as u64 - BURST);
    assert!(t0.elapsed() >= floor, "{:?} < {floor:?}", t0.elapsed());
    assert_eq!(
        proxy.stats_handle().bytes(Direction::ServerToClient),
        len as u64
    );
}

#[tokio::test(start_paused = true)]
async fn client_to_server_is_paced_too() {
    let (up, mut totals, _) = sink().await;
    let proxy = FaultProxy::builder(up)
        .bandwidth(RATE)
        .start()
        .await
        .unwrap();
    let len = 1024 * 1024u64;
    let t0 = Instant::now();
    let mut c = connect(&proxy).await;
    c.write_all(&pattern(len as usize)).await.unwrap();
    c.shutdown().await.unwrap();
    let total = timeout(BOUND, totals.recv())
        .await
        .expect("sink hung")
        .unwrap();
    assert_eq!(total, len);
    let floor = Duration::from_micros(len - BURST);
    assert!(t0.elapsed() >= floor, "{:?} < {floor:?}", t0.elapsed());
}

#[tokio::test(start_paused = true)]
async fn bandwidth_and_one_way_delay_add_up() {
    // The first byte waits for the delay; the last one for the rate and the
    // delay: a 1 MiB transfer at 1 MB/s over a 500 ms one-way delay.
    let len = 1024 * 1024;
    let delay = Duration::from_millis(500);
    let proxy = FaultProxy::builder(source(len).await)
        .bandwidth(RATE)
        .one_way_delay(delay)
        .start()
        .await
        .unwrap();
    let t0 = Instant::now();
    let mut c = connect(&proxy).await;
    first_byte_after(&mut c, t0, delay).await;
    let mut rest = Vec::new();
    timeout(BOUND, c.read_to_end(&mut rest))
        .await
        .expect("read hung")
        .unwrap();
    assert_eq!(rest.len() + 1, len);
    let floor = delay + Duration::from_micros(len as u64 - BURST);
    assert!(t0.elapsed() >= floor, "{:?} < {floor:?}", t0.elapsed());
}
