//! Forwarding and lifecycle: a lost first request, half-close, loopback only, unreachable upstreams, shutdown, remotes.

use std::io::ErrorKind;
use std::sync::atomic::Ordering;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use spark_connect_testkit::AddrRole;
use spark_connect_testkit::FaultProxy;
use spark_connect_testkit::FaultProxyError;
use tokio::net::TcpListener;
use tokio::net::TcpStream;
use tokio::time::timeout;

use crate::{BOUND, connect, echo, echo_roundtrip, pattern, read_all, sink};

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
    let s = proxy.stats();
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
    let s = proxy.stats();
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
    assert_eq!(proxy.stats().upstream_errors, 1);
}

#[tokio::test]
async fn shutdown_closes_live_connections_and_listener() {
    let up = echo().await;
    let proxy = FaultProxy::builder(up).start().await.unwrap();
    let addr = proxy.local_addr();
    assert_eq!(proxy.remote(), format!("sc://{addr}"));
    let mut c = connect(&proxy).await;
    echo_roundtrip(&mut c, b"x").await;
    let stats = proxy.stats_handle();
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
