//! Through a real HTTP CONNECT egress proxy (tinyproxy with basic auth,
//! `scripts/egress-proxy.sh`, started by `.ci/run`): a query is exact
//! while the proxy restarts mid-stream (every tunnel cut), and a proxy
//! that refuses the credentials is a transport failure that names no
//! secret. The server behind it is the embedded one: what is under test
//! is the proxy path, and the embedded server's fault script holds the
//! stream still while the proxy restarts.
//!
//! `SPARK_CONNECT_TEST_EGRESS_PROXY` is the proxy URL with its credentials
//! (`http://user:password@127.0.0.1:port`).

use std::process::Command;

use spark_connect_retry::policy::{PySparkPolicy, RetryPolicy};
use spark_connect_retry::retrying::PySparkRetrying;
use spark_connect_testkit::{Fault, Rpc, TestServer};

use crate::{Check, Duration, RecordingSleeper, Retrying, SparkSession, absorb, assert_exact};

const ROWS: i64 = 200_000;
const BOUND: Duration = Duration::from_secs(120);

fn proxy_url() -> Option<String> {
    std::env::var(crate::needs::EGRESS).ok()
}

/// The proxy's port, from its URL.
fn proxy_port(url: &str) -> String {
    url.rsplit(':')
        .next()
        .expect("a port")
        .trim_end_matches('/')
        .to_owned()
}

real_test!(
    a_query_is_exact_while_the_egress_proxy_restarts,
    needs = [EGRESS]
);
async fn a_query_is_exact_while_the_egress_proxy_restarts() {
    let Some(url) = proxy_url() else { return };
    let server = TestServer::builder()
        .rows_per_batch(1000)
        .start()
        .await
        .unwrap();
    // The stream holds still after 20 responses while the proxy restarts.
    server.faults().push(
        Fault::stall(Duration::from_secs(2))
            .on(Rpc::ExecutePlan)
            .after_responses(20),
    );
    let spark = SparkSession::builder()
        .remote(server.remote())
        .egress_proxy(url.clone())
        .build()
        .unwrap();
    let mut stream = spark
        .sql(&format!("SELECT id, id*2 AS x FROM range({ROWS})"))
        .await
        .unwrap();
    let mut check = Check {
        in_order: true,
        ..Default::default()
    };
    let mut restarted = false;
    let read = async {
        while let Some(b) = stream.next_batch().await {
            absorb(&mut check, &b.expect("a batch"));
            if !restarted && check.rows >= 10_000 {
                restarted = true;
                let status = Command::new(concat!(
                    env!("CARGO_MANIFEST_DIR"),
                    "/scripts/egress-proxy.sh"
                ))
                .args(["restart", &proxy_port(&url)])
                .status()
                .expect("run scripts/egress-proxy.sh");
                assert!(status.success(), "the proxy restarted");
            }
        }
    };
    tokio::time::timeout(BOUND, read).await.expect("hung");
    assert!(restarted);
    assert_exact(&check, ROWS);
    let stats = stream.stats();
    assert!(
        stats.reattaches >= 1,
        "the cut tunnel was resumed by a reattach: {stats:?}"
    );
    assert_eq!(stats.re_executes, 0, "{stats:?}");
    spark.close().await.unwrap();
    server.shutdown().await;
}

real_test!(
    wrong_proxy_credentials_are_a_transport_failure_naming_no_secret,
    needs = [EGRESS]
);
async fn wrong_proxy_credentials_are_a_transport_failure_naming_no_secret() {
    let Some(url) = proxy_url() else { return };
    let server = TestServer::start().await.unwrap();
    let (_, host) = url.rsplit_once('@').expect("the proxy URL has credentials");
    let wrong = format!("http://nobody:wrong-egress-secret@{host}");
    let sleeper = RecordingSleeper::new();
    let policy = RetryPolicy::pyspark_builder()
        .max_retries(Some(2))
        .jitter_ms(0.0)
        .build()
        .unwrap();
    let spark = SparkSession::builder()
        .remote(server.remote())
        .egress_proxy(wrong)
        .retrying(Retrying::pyspark_with(vec![policy]).with_sleeper(sleeper.clone()))
        .build()
        .unwrap();
    let err = tokio::time::timeout(BOUND, spark.sql("SELECT 1"))
        .await
        .expect("hung")
        .expect_err("the proxy refuses the tunnel");
    let text = format!("{err} {err:?}");
    assert!(!text.contains("wrong-egress-secret"), "{text}");
    assert_eq!(
        sleeper.sleeps_ms().len(),
        2,
        "retried under the policy like any failed connection: {text}"
    );
    assert_eq!(server.calls().execute, 0, "nothing reached the server");
    server.shutdown().await;
}
