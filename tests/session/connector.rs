//! A session whose connections are dialled by a `Connector`: queries are
//! exact through a cut, and every connection, the first and the fresh one
//! after the cut, goes through the connector (the host is a name no
//! resolver knows, so nothing else could have dialled it).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use spark_connect_retry::connector::Connector;
use spark_connect_retry::session::SparkSession;
use spark_connect_testkit::{Fault, Rpc, TestServer};

#[tokio::test]
async fn queries_over_a_connector_are_exact_through_a_cut() {
    let server = TestServer::builder()
        .rows_per_batch(100)
        .start()
        .await
        .unwrap();
    server.faults().push(
        Fault::reset_connection()
            .on(Rpc::ExecutePlan)
            .after_responses(3),
    );
    let addr = server.addr();
    let dials = Arc::new(AtomicU64::new(0));
    let seen = dials.clone();
    let connector = Connector::new(tower::service_fn(move |uri: http::Uri| {
        seen.fetch_add(1, Ordering::SeqCst);
        async move {
            assert_eq!(uri.host(), Some("spark.invalid"));
            tokio::net::TcpStream::connect(addr)
                .await
                .map(hyper_util::rt::TokioIo::new)
        }
    }));
    let spark = SparkSession::builder()
        .remote("sc://spark.invalid:15002")
        .connector(connector)
        .build()
        .unwrap();
    let batches = spark
        .sql("SELECT id FROM range(0, 10000)")
        .await
        .unwrap()
        .collect()
        .await
        .unwrap();
    let rows: usize = batches.iter().map(|b| b.num_rows()).sum();
    assert_eq!(rows, 10_000);
    assert!(
        dials.load(Ordering::SeqCst) >= 2,
        "the connection after the cut was dialled by the connector too: {} dial(s)",
        dials.load(Ordering::SeqCst)
    );
    spark.close().await.unwrap();
    server.shutdown().await;
}
