//! The Prometheus endpoint: the guard's counts, labels bounded.

use spark_connect_guard::Guard;
use spark_connect_stub::spark::connect::spark_connect_service_client::SparkConnectServiceClient;
use spark_connect_testkit::TestServer;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::support::{SESSION, assert_exact, drain, range_sql, sql_request};

async fn get(addr: std::net::SocketAddr, path: &str) -> String {
    let mut tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    tcp.write_all(
        format!("GET {path} HTTP/1.1\r\nHost: guard\r\nConnection: close\r\n\r\n").as_bytes(),
    )
    .await
    .unwrap();
    let mut out = String::new();
    tokio::time::timeout(
        std::time::Duration::from_secs(10),
        tcp.read_to_string(&mut out),
    )
    .await
    .expect("scrape hung")
    .unwrap();
    out
}

#[tokio::test]
async fn the_scrape_shows_the_guards_counts_with_bounded_labels() {
    let server = TestServer::start().await.unwrap();
    let guard = Guard::builder(server.remote())
        .metrics_listen("127.0.0.1:0".parse().unwrap())
        .start()
        .await
        .unwrap();
    let metrics = guard.metrics_addr().expect("a metrics endpoint");
    let channel = crate::support::channel_to(guard.local_addr());
    let mut client = SparkConnectServiceClient::new(channel).max_decoding_message_size(usize::MAX);
    let out = drain(&mut client, sql_request(&range_sql(10_000))).await;
    assert_exact(&out, 10_000);
    let text = get(metrics, "/metrics").await;
    assert!(text.starts_with("HTTP/1.1 200"), "{text}");
    for line in [
        "spark_connect_guard_calls_ended_total{method=\"ExecutePlan\",code=\"OK\"} 1",
        "spark_connect_guard_clients 1",
        "spark_connect_guard_connections_total 1",
        "spark_connect_guard_open_streams 0",
        "spark_connect_guard_refused_total 0",
    ] {
        assert!(text.contains(line), "no {line:?} in\n{text}");
    }
    assert!(
        text.contains("spark_connect_guard_sent_bytes_total "),
        "{text}"
    );
    assert!(!text.contains(SESSION), "a session id in the labels");
    assert!(get(metrics, "/other").await.starts_with("HTTP/1.1 404"));
    guard.shutdown().await;
}

#[tokio::test]
async fn metrics_are_off_unless_asked_for() {
    let server = TestServer::start().await.unwrap();
    let guard = Guard::builder(server.remote()).start().await.unwrap();
    assert_eq!(guard.metrics_addr(), None);
    guard.shutdown().await;
}

/// A scripted run: a server that ends every stream after 5 responses and
/// resets one reattached stream after 2. The guard's counts of reattaches by
/// cause are exactly what the server saw, in its stats and in the scrape.
#[tokio::test]
async fn reattaches_are_counted_by_cause() {
    use spark_connect_testkit::{Fault, Rpc};

    let server = TestServer::builder()
        .rows_per_batch(1000)
        .max_responses_per_stream(5)
        .start()
        .await
        .unwrap();
    server.faults().push(
        Fault::reset_connection()
            .on(Rpc::ReattachExecute)
            .after_responses(2),
    );
    let guard = Guard::builder(server.remote())
        .metrics_listen("127.0.0.1:0".parse().unwrap())
        .start()
        .await
        .unwrap();
    let channel = crate::support::channel_to(guard.local_addr());
    let mut client = SparkConnectServiceClient::new(channel).max_decoding_message_size(usize::MAX);
    let out = drain(&mut client, sql_request(&range_sql(20_000))).await;
    assert_exact(&out, 20_000);
    drop(client);
    let reattaches = server.calls().reattach;
    let stats = crate::support::eventually_stats(&guard, |s| s.resumed_streams == 1).await;
    let by = |cause| {
        stats
            .reattaches
            .iter()
            .find(|(c, _)| *c == cause)
            .unwrap()
            .1
    };
    assert_eq!(by("fault"), 1, "{stats:?}");
    assert_eq!(by("stall"), 0, "{stats:?}");
    assert_eq!(by("graceful_end") + 1, reattaches, "{stats:?}");
    assert_eq!(stats.re_executes, 0, "{stats:?}");
    let text = get(guard.metrics_addr().unwrap(), "/metrics").await;
    for line in [
        "spark_connect_guard_reattaches_total{cause=\"fault\"} 1".to_owned(),
        format!(
            "spark_connect_guard_reattaches_total{{cause=\"graceful_end\"}} {}",
            reattaches - 1
        ),
        "spark_connect_guard_resumed_streams_total 1".to_owned(),
    ] {
        assert!(text.contains(&line), "no {line:?} in\n{text}");
    }
    guard.shutdown().await;
}
