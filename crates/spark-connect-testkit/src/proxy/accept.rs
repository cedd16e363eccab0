//! The accept loop: counts connections, refuses the first ones when asked,
//! loses the first request when asked, and hands every other connection to
//! its own task. Also the timer that cuts all live connections periodically.

use std::io;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::time::{Instant, sleep_until};

use super::connection::connection;
use super::cut::CutReason;
use super::shared::CHUNK;
use super::shared::Shared;
use super::stats::ActiveGuard;

pub(super) async fn ticker(
    shared: Arc<Shared>,
    period: Duration,
    mut shutdown: watch::Receiver<bool>,
) {
    let mut next = Instant::now() + period;
    loop {
        tokio::select! {
            _ = sleep_until(next) => {
                next += period;
                shared.request_cut_all(CutReason::Timer);
            }
            r = shutdown.changed() => if r.is_err() || *shutdown.borrow() { return },
        }
    }
}

pub(super) async fn accept_loop(
    listener: TcpListener,
    shared: Arc<Shared>,
    mut shutdown: watch::Receiver<bool>,
) {
    let mut lost_done = false;
    loop {
        let (client, _) = tokio::select! {
            r = listener.accept() => match r {
                Ok(c) => c,
                // Transient accept errors (e.g. EMFILE, aborted handshakes):
                // keep serving rather than silently dying mid-test.
                Err(e) => {
                    tracing::debug!("fault proxy accept failed: {e}");
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    continue;
                }
            },
            r = shutdown.changed() => if r.is_err() || *shutdown.borrow() { return } else { continue },
        };
        let stats = &shared.stats.inner;
        let index = stats.connections.fetch_add(1, Ordering::SeqCst);
        let _ = client.set_nodelay(true);

        if index < shared.config.refuse_first {
            stats.refused.fetch_add(1, Ordering::SeqCst);
            let _ = client.set_zero_linger();
            drop(client);
            continue;
        }

        stats.active.fetch_add(1, Ordering::SeqCst);
        let guard = ActiveGuard(shared.stats.clone());
        if let (Some(min_bytes), false) = (shared.config.lose_first_request, lost_done) {
            lost_done = true;
            tokio::spawn(lose_request(
                client,
                min_bytes,
                shared.clone(),
                shutdown.clone(),
                guard,
            ));
            continue;
        }

        let proxied = stats.proxied.fetch_add(1, Ordering::SeqCst);
        tokio::spawn(connection(
            client,
            index,
            proxied,
            shared.clone(),
            shutdown.clone(),
            guard,
        ));
    }
}

async fn lose_request(
    client: TcpStream,
    min_bytes: u64,
    shared: Arc<Shared>,
    mut shutdown: watch::Receiver<bool>,
    _guard: ActiveGuard,
) {
    let mut buf = vec![0u8; CHUNK];
    let mut seen = 0u64;
    while seen < min_bytes {
        tokio::select! {
            r = client.readable() => {
                if r.is_err() { break }
                match client.try_read(&mut buf) {
                    Ok(0) => break,
                    Ok(n) => seen += n as u64,
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                    Err(_) => break,
                }
            }
            r = shutdown.changed() => if r.is_err() || *shutdown.borrow() { return },
        }
    }
    shared
        .stats
        .inner
        .lost_requests
        .fetch_add(1, Ordering::SeqCst);
    let _ = client.set_zero_linger();
}
